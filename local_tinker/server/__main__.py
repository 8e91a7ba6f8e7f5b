"""`python -m local_tinker.server [host=...] [port=8000] [precision=float32] [checkpoint_root=...]`"""

import chz

from local_tinker.command import config_from_argv, one_line_errors
from local_tinker.main_thread import run_with_engine_on_main_thread
from local_tinker.server.serve import ServerConfig, serve

if __name__ == "__main__":
    config = config_from_argv(chz.Blueprint(ServerConfig))  # a bad setting prints one "error: ..." line
    with one_line_errors():
        run_with_engine_on_main_thread(lambda: serve(config))  # see local_tinker/main_thread.py
