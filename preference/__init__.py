"""preference."""
