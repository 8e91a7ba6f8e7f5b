"""`run_recipe`: which thread a recipe runs on, by backend (the local engine computes on the main one)."""

import threading

import chz
import pytest

from recipes_lib.cli import run_recipe
from recipes_lib.config import BackendConfig, backend_field


@chz.chz
class _Config:
    backend: BackendConfig = backend_field()


@pytest.mark.parametrize(("backend", "thread"), [("local", "recipes-main"), ("tinker", "MainThread")])
def test_a_local_engine_recipe_runs_beside_the_main_thread_and_a_hosted_one_on_it(backend: str, thread: str) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("run_recipe hosts only from the main thread")
    seen: list[str] = []
    run_recipe(lambda config: seen.append(threading.current_thread().name), chz.Blueprint(_Config),
               [f"backend={backend}"])
    assert seen == [thread]
