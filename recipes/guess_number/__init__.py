"""The guess number task: its data, environment or dataset builder, evaluators and Inspect task."""
