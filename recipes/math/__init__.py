"""The math task: its data, environment or dataset builder, evaluators and Inspect task."""
