"""`python -m recipes_lib.server key=value ...`: the old name of `python -m local_tinker.server`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("local_tinker.server", run_name="__main__", alter_sys=True)
