"""`python -m local_tinker.server [host=...] [port=8000] [precision=float32] [checkpoint_root=...]`"""

import chz

from local_tinker.command import config_from_argv, one_line_errors
from local_tinker.host import run_hosted
from local_tinker.server.serve import ServerConfig, serve

if __name__ == "__main__":
    config = config_from_argv(chz.Blueprint(ServerConfig))  # a bad setting prints one "error: ..." line
    with one_line_errors():
        run_hosted(lambda: serve(config))  # the engine computes on this (main) thread: see `host`
