"""`python -m recipes_lib.server [host=...] [port=8000] [precision=float32] [checkpoint_root=...]`"""

import chz

from recipes_lib.cli import config_from_argv
from recipes_lib.server.serve import ServerConfig, serve

if __name__ == "__main__":
    serve(config_from_argv(chz.Blueprint(ServerConfig)))
