"""SmolLM2 learns to use a calculator: see train.py and README.md."""
