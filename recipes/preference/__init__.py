"""Preference-learning recipes: `python -m recipes.preference.train` (DPO)."""
