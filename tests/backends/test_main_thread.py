"""`host.run_with_engine_on_main_thread`: the recipe runs on a second thread and the main thread serves its local engine.

Each case runs in a fresh interpreter, where the test controls which thread is the main one.
"""

import subprocess
import sys
import textwrap
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING

import pytest

from tests import forked

if TYPE_CHECKING:
    from local_tinker.engine import LocalEngine

PRELUDE = """
import faulthandler; faulthandler.dump_traceback_later(200, exit=True)  # a hang shows where
import threading, torch
from tinker import types
from local_tinker.clients import ServiceClient
from local_tinker.engine import get_engine
from local_tinker.main_thread import run_with_engine_on_main_thread
"""


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return forked.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], capture_output=True, text=True,
                      timeout=240)


def test_the_main_thread_serves_the_engine_the_recipe_creates() -> None:
    out = _python("""
        torch.set_num_threads(2)
        def recipe():
            service = ServiceClient(precision="float32", device="cpu")
            sampler = service.create_sampling_client(base_model="recipes/tiny-llama")
            response = sampler.sample(types.ModelInput.from_ints([5, 6, 7]), 2,
                                      types.SamplingParams(max_tokens=3, seed=0)).result()
            engine = get_engine("float32", "cpu")
            served_by = engine.call(lambda: (threading.current_thread().name, torch.get_num_threads())).result()
            return threading.current_thread().name, torch.get_num_threads(), served_by, len(response.sequences)
        print(run_with_engine_on_main_thread(recipe))
        # After the recipe, the same engine still serves this process's requests, on a worker thread.
        print(get_engine("float32", "cpu").call(lambda: threading.current_thread().name).result())
    """)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.strip().splitlines()[-2:]
    assert first == "('recipes-main', 1, ('MainThread', 2), 2)"
    assert second == "recipes-local-engine"


def test_the_recipes_result_and_error_come_back_to_the_caller() -> None:
    out = _python("""
        print(run_with_engine_on_main_thread(lambda: 41 + 1))
        def fails():
            raise ValueError("bad key")
        try:
            run_with_engine_on_main_thread(fails)
        except ValueError as exc:
            print("raised", exc)
        print(run_with_engine_on_main_thread(lambda: run_with_engine_on_main_thread(lambda: threading.current_thread().name)))  # nested: same thread
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-3:] == ["42", "raised bad key", "recipes-main"]


@pytest.mark.parametrize("where", ["own_work", "training", "before_the_engine"])
def test_ctrl_c_reaches_the_recipe_and_then_the_caller(where: str) -> None:
    """Ctrl-C on the main thread (SIGINT from another thread here) unwinds the recipe's thread once.

    Training, it comes from the request the recipe waits on; busy with its own work (a sleep), from
    its next request; before it made its engine, from the first request of the engine it makes.
    """
    out = _python(f"""
        import os, signal, time
        unwound = []
        def recipe():
            threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
            try:
                if "{where}" == "before_the_engine":
                    time.sleep(2.0)
                service = ServiceClient(precision="float32", device="cpu")
                trainer = service.create_lora_training_client("recipes/tiny-llama", rank=2, seed=0)
                datum = types.Datum(model_input=types.ModelInput.from_ints([5, 6, 7]),
                                    loss_fn_inputs={{"target_tokens": [6, 7, 8], "weights": [1.0, 1.0, 1.0]}})
                while True:
                    if "{where}" == "own_work":
                        time.sleep(0.3)
                    trainer.forward_backward([datum], "cross_entropy").result()
            finally:
                unwound.append(True)
        try:
            run_with_engine_on_main_thread(recipe)
        except KeyboardInterrupt:
            print("interrupted", unwound)
        # The engine serves this process again, on a worker thread.
        print(get_engine("float32", "cpu").call(lambda: threading.current_thread().name).result())
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-2:] == ["interrupted [True]", "recipes-local-engine"]


def _engine() -> "LocalEngine":
    from local_tinker.engine import LocalEngine
    from local_tinker.precision import resolve_precision

    return LocalEngine(resolve_precision("float32", "cpu"))  # not adopted: a worker thread serves it


def test_after_an_interrupt_requests_fail_until_the_engine_recovers() -> None:
    engine = _engine()
    try:
        engine.interrupt()
        with pytest.raises(KeyboardInterrupt):
            engine.call(lambda: 1)
        assert engine.recover()
        assert engine.call(lambda: 2).result() == 2
    finally:
        engine.stop()


def test_a_lock_left_held_by_an_interrupted_caller_fails_requests_instead_of_hanging() -> None:
    engine = _engine()
    try:
        engine.interrupt()
        holder = threading.Thread(target=engine._cond.acquire)  # dies holding it, as an async exception can leave it
        holder.start()
        holder.join()
        assert not engine.recover(timeout_s=0.05)
        with pytest.raises(KeyboardInterrupt):
            engine.call(lambda: 1)
    finally:
        engine._stopped.set()  # `stop` would wait for that lock


def _ctrl_c(_: object) -> None:
    raise KeyboardInterrupt


def test_a_ctrl_c_while_a_result_wakes_its_caller_stops_serving_and_keeps_the_result() -> None:
    # The Ctrl-C lands in the future's callbacks (e.g. waking the caller's event loop), once the
    # result is set: serving stops, and the finished future is left as it is.
    from local_tinker.engine import _resolve

    future: Future[int] = Future()
    future.add_done_callback(_ctrl_c)
    assert threading.current_thread() is threading.main_thread()  # where a Ctrl-C stops serving
    with pytest.raises(KeyboardInterrupt):
        _resolve(future, lambda: 42)
    assert future.result(timeout=0) == 42


def test_a_ctrl_c_while_a_mapped_result_wakes_its_caller_goes_on_to_the_engine() -> None:
    from local_tinker.futures import LocalFuture

    done: Future[int] = Future()
    mapped = LocalFuture(done).map(lambda value: value + 1).future()
    mapped.add_done_callback(_ctrl_c)
    done.set_running_or_notify_cancel()
    with pytest.raises(KeyboardInterrupt):  # not swallowed as a failing callback of `done`
        done.set_result(41)
    assert mapped.result(timeout=0) == 42
