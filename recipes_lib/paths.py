"""Where the project keeps files on this machine (`$RECIPES_HOME`) and the default model's name: the
engine owns both (it converts models and stores checkpoints there); this is the cookbook's doorway."""

from local_tinker.home import SMOLLM2_NAME, hub_failure, prefer_offline_hub, recipes_home, recipes_home_path

__all__ = ["SMOLLM2_NAME", "hub_failure", "prefer_offline_hub", "recipes_home", "recipes_home_path"]
