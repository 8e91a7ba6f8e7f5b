"""`python -m recipes_lib.server [host=...] [port=8000] [precision=float32] [checkpoint_root=...]`"""

import chz

from recipes_lib.cli import run_recipe
from recipes_lib.server.serve import ServerConfig, serve

if __name__ == "__main__":
    run_recipe(serve, chz.Blueprint(ServerConfig))  # a bad setting prints one "error: ..." line
