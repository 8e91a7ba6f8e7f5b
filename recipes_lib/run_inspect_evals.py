"""`python -m recipes_lib.run_inspect_evals ...`: the reference cookbook's top-level name for
`python -m eval.run_inspect_evals` (same keys, same behaviour; see that module)."""

import runpy

if __name__ == "__main__":
    # The evaluation CLI lives in the `eval` pipeline, a layer above recipes_lib: run it by name.
    runpy.run_module("eval.run_inspect_evals", run_name="__main__", alter_sys=True)
