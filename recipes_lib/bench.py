"""`python -m recipes_lib.bench key=value ...`: the old name of `python -m local_tinker.bench` (`make bench`)."""

import runpy

if __name__ == "__main__":
    runpy.run_module("local_tinker.bench", run_name="__main__", alter_sys=True)
