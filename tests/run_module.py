"""`python -m <module> <args>` run in the test process, through its `__main__` block (no interpreter
start-up per command): the Tinker-name map (tests/test_spec_map.py), the docs' commands and the bad-input table use it."""

import runpy
import sys

import pytest


def run_as_main(module: str, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int | str | None:
    """Run `module` as `python -m module *argv` would; returns the exit code it raised SystemExit with."""
    monkeypatch.setattr(sys, "argv", [module, *argv])
    monkeypatch.delitem(sys.modules, module, raising=False)  # runpy runs it as __main__, not the imported copy
    with pytest.raises(SystemExit) as exited:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    return exited.value.code
