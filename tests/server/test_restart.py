"""`kill -9` of the server in the middle of a run, a restart, and the recipe rerun with resume.

The server and the recipe run as separate processes (as a user runs them). Once the run has
written a checkpoint the server is killed with SIGKILL; the recipe stops by itself within seconds
with one message naming the server and the resume command. A new server on the same checkpoint
root loads the `tinker://` checkpoint, and the rerun with `behavior_if_log_dir_exists=resume`
continues from it and finishes with every step logged once.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from local_tinker.server.serve import free_port
from recipes_lib.checkpoints import load_checkpoints
from recipes_lib.logging import read_metrics
from tests import forked
from tests.server.conftest import API_KEY

STEPS = 12


def _start_server(port: int, env: dict[str, str], stderr: int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    process = forked.popen([sys.executable, "-m", "local_tinker.server", f"port={port}", "precision=float32",
                            "device=cpu"], env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v1/healthz", timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise AssertionError("the server did not start within 60 s")


def _recipe(port: int, log_path: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return forked.popen([
        sys.executable, "-m", "recipes.sl_basic", "model_name=recipes/tiny-llama", f"max_steps={STEPS}",
        "save_every=3", "eval_every=0", "dataset.num_train=200", "dataset.num_heldout=4",
        "evaluator_builders.0.max_tokens=2", "backend=tinker", f"backend.base_url=http://127.0.0.1:{port}",
        f"log_path={log_path}", "behavior_if_log_dir_exists=resume"], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_for_checkpoint(log_path: Path, recipe: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if (log_path / "checkpoints.jsonl").exists() and any(r.state_path for r in load_checkpoints(log_path)):
            return
        assert recipe.poll() is None, recipe.stderr.read().decode() if recipe.stderr else ""
        time.sleep(0.05)
    raise AssertionError("no checkpoint within 120 s")


def test_kill_9_restart_and_resume(tmp_path: Path) -> None:
    env = {**os.environ, "RECIPES_SERVER_API_KEY": API_KEY, "TINKER_API_KEY": API_KEY, "OMP_NUM_THREADS": "1"}
    port, log_path = free_port(), tmp_path / "run"
    server = _start_server(port, env)
    recipe = _recipe(port, log_path, env)
    try:
        _wait_for_checkpoint(log_path, recipe)
        server.send_signal(signal.SIGKILL)
        server.wait()
        killed = time.monotonic()
        assert recipe.poll() is None, "the run finished before the server was killed; make it longer"
        _, stderr = recipe.communicate(timeout=60)  # it stops by itself (the SDK alone would retry for minutes)
        waited = time.monotonic() - killed
    finally:
        recipe.kill()
        recipe.wait()
        server.kill()
    assert recipe.returncode == 1 and waited < 30, (recipe.returncode, waited)
    lines = [line for line in stderr.decode().splitlines() if line.strip()]
    assert lines[-1].startswith(f"error: The Tinker server at http://127.0.0.1:{port} stopped answering: "
                                "connections to"), lines[-3:]
    assert "Traceback" not in stderr.decode() and lines[-1].endswith("behavior_if_log_dir_exists=resume")
    killed_at = [row["step"] for row in read_metrics(log_path)]
    assert killed_at and killed_at[-1] < STEPS - 1

    server = _start_server(port, env)
    try:
        rerun = _recipe(port, log_path, env)
        _, stderr = rerun.communicate(timeout=180)
        assert rerun.returncode == 0, stderr.decode()[-3000:]
    finally:
        server.kill()
        server.wait()
    steps = [row["step"] for row in read_metrics(log_path)]
    assert steps == list(range(STEPS)), (killed_at, steps)
    assert load_checkpoints(log_path)[-1].name == "final"


BUSY_CLIENT = """
import sys, tinker
from tinker import types
service = tinker.ServiceClient(base_url=sys.argv[1], api_key=sys.argv[2])
trainer = service.create_lora_training_client(base_model="recipes/tiny-llama", rank=4).result()
datum = types.Datum(model_input=types.ModelInput.from_ints(list(range(5, 400))),
                    loss_fn_inputs={"target_tokens": list(range(6, 401)), "weights": [1.0] * 395})
futures = [trainer.forward_backward([datum] * 8, "cross_entropy") for _ in range(30)]
print("submitted", flush=True)
for future in futures:
    future.result()
"""


@pytest.mark.parametrize("busy", [False, True])
def test_ctrl_c_stops_the_server_without_a_traceback(busy: bool) -> None:
    """Idle, or training with requests queued (they fail as "server is stopping"): exit 130 at once."""
    port = free_port()
    env = {**os.environ, "RECIPES_SERVER_API_KEY": API_KEY, "OMP_NUM_THREADS": "1"}
    server = _start_server(port, env, stderr=subprocess.PIPE)
    client = None
    try:
        if busy:
            client = forked.popen([sys.executable, "-c", BUSY_CLIENT, f"http://127.0.0.1:{port}", API_KEY],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            assert client.stdout is not None and client.stdout.readline().strip() == "submitted"
            time.sleep(1.0)  # the server is now working through the queue
        server.send_signal(signal.SIGINT)
        _, stderr = server.communicate(timeout=60)
    finally:
        server.kill()
        if client is not None:
            client.kill()
            client.wait()
    assert server.returncode == 130 and "Traceback" not in stderr.decode(), stderr.decode()[-3000:]
