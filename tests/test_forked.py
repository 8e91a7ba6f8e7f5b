"""tests/forked.py stands in for `python`: each command run both ways, forked from the zygote and in a
real interpreter, gives the same exit code, output, environment, working directory and signal
behaviour (the real interpreter is the reference; these commands import nothing heavy, so it starts
in a fraction of a second)."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import forked

PROBE = "import os, sys; print(sys.argv[1:], os.getcwd(), os.environ.get('FORK_PROBE'), repr(sys.path[0]))"
CASES = {
    "exit code": ["-c", "import sys; print('out'); sys.exit(3)"],
    "exit message": ["-c", "raise SystemExit('error: bad key')"],
    "uncaught exception": ["-c", "raise ValueError('boom')"],
    "argv, cwd, environment, path": ["-c", PROBE, "a", "b c"],
    "module": ["-m", "json.tool", "--sort-keys"],
    "threads finish before exit": ["-c", "import threading, time\n"
                                   "threading.Thread(target=lambda: (time.sleep(0.2), print('late'))).start()\n"
                                   "print('main')"],
    "atexit": ["-c", "import atexit; atexit.register(print, 'at exit'); print('body')"],
    "uncaught KeyboardInterrupt": ["-c", "raise KeyboardInterrupt"],
    "stderr unbuffered order": ["-c", "import sys; print('to err', file=sys.stderr); sys.exit(0)"],
}


def _both(args: list[str], **kwargs: object) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    command = [sys.executable, *args]
    ours = forked.run(command, capture_output=True, text=True, timeout=60, **kwargs)  # type: ignore[arg-type]
    real = subprocess.run(command, capture_output=True, text=True, timeout=60, **kwargs)  # type: ignore[call-overload]
    return ours, real


@pytest.mark.parametrize("case", CASES)
def test_a_forked_command_behaves_as_the_interpreter_does(case: str, tmp_path: Path) -> None:
    env = {**os.environ, "FORK_PROBE": "seen"}
    ours, real = _both(CASES[case], cwd=tmp_path, env=env, input='{"b": 1, "a": [2]}')
    assert ours.returncode == real.returncode
    assert ours.stdout == real.stdout
    # A traceback has the zygote's frames above the command's: the message line must match.
    assert ours.stderr.strip().splitlines()[-1:] == real.stderr.strip().splitlines()[-1:]


def test_a_script_runs_with_its_folder_first_on_the_path(tmp_path: Path) -> None:
    (tmp_path / "helper_module_for_fork_test.py").write_text("VALUE = 41\n")
    script = tmp_path / "script.py"
    script.write_text("import sys, helper_module_for_fork_test as h\nprint(h.VALUE + 1, sys.argv)\n")
    ours, real = _both([str(script), "x"])
    assert ours.returncode == real.returncode == 0 and ours.stdout == real.stdout
    assert ours.stdout.startswith("42 ")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, -signal.SIGINT), (signal.SIGKILL, -signal.SIGKILL),
                                           (signal.SIGTERM, -signal.SIGTERM)])
def test_signals_end_a_forked_command_as_they_end_python(sig: int, code: int) -> None:
    """Ctrl-C reaches the command's main thread as KeyboardInterrupt (uncaught: the process ends by
    SIGINT, as python's does); SIGKILL and SIGTERM end it at once."""
    for start in (forked.popen, subprocess.Popen):
        process = start([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        assert process.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=0.05)
        process.send_signal(sig)
        _, err = process.communicate(timeout=30)
        assert process.returncode == code, (start, err)
        if sig == signal.SIGINT:
            assert err.rstrip().endswith("KeyboardInterrupt"), err


def test_a_caught_ctrl_c_exits_with_the_commands_own_code() -> None:
    code = ("import sys, time\ntry:\n    print('ready', flush=True); time.sleep(60)\n"
            "except KeyboardInterrupt:\n    sys.exit(130)")
    process = forked.popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=30) == 130


def test_the_thread_count_follows_omp_num_threads() -> None:
    code = "import torch; print(torch.get_num_threads())"
    for threads in ("1", "2"):
        ours, real = _both(["-c", code], env={**os.environ, "OMP_NUM_THREADS": threads})
        assert ours.stdout == real.stdout == f"{threads}\n"


def test_what_the_zygote_cannot_stand_in_for_runs_in_a_real_interpreter() -> None:
    def kind(args: list[str], **kwargs: object) -> type:
        process = forked.popen(args, stdout=subprocess.DEVNULL, **kwargs)  # type: ignore[arg-type]
        process.wait(timeout=60)
        return type(process)

    python = sys.executable
    assert kind([python, "-c", "pass"]) is forked.ForkedPopen
    assert kind([python, "-I", "-c", "pass"]) is subprocess.Popen  # interpreter flags
    assert kind(["true"]) is subprocess.Popen  # not python
    other_isa = {**os.environ, "ATEN_CPU_CAPABILITY": "default" if os.environ.get("ATEN_CPU_CAPABILITY") != "default"
                 else "avx2"}
    assert kind([python, "-c", "pass"], env=other_isa) is subprocess.Popen  # read once, at start-up


def test_the_heavy_modules_are_imported_before_the_command_starts() -> None:
    """The point of the zygote: a command starts with torch, transformers, peft and the SDK imported."""
    code = "import sys; print([name in sys.modules for name in ('torch', 'transformers', 'peft', 'tinker')])"
    ours, real = _both(["-c", code])
    assert ours.stdout == "[True, True, True, True]\n" and real.stdout == "[False, False, False, False]\n"
