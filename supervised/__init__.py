"""supervised."""
