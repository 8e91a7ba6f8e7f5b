"""The Python sandbox: programs run and say how they ended; every limit stops what it bounds and says so;
the host's files, network and processes are out of reach; nothing of a run is left behind."""

import ast
import asyncio
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import chz
import pytest

from recipes_lib.exceptions import ConfigurationError
from renderers import ToolCall
from tool_use import ToolErrorKind, ToolLimits, handle_tool_call
from tool_use.python_runner import (
    LAUNCHER_MARK,
    SCRIPT,
    PythonRunner,
    SandboxLimits,
    SandboxOutcome,
    StopReason,
    _limit_raised,
    describe,
    run_sandboxed,
    sandbox_problem,
)

PROBLEM = sandbox_problem()
needs_sandbox = pytest.mark.skipif(PROBLEM is not None, reason=f"the sandbox cannot run here: {PROBLEM}")
# Short, so the file runs in seconds; the wall clock leaves room for a machine busy training.
LIMITS = SandboxLimits(cpu_s=1, wall_s=8.0, memory_mib=256, max_processes=8, disk_mib=8,
                       max_output_bytes=2000)


def run(code: str, limits: SandboxLimits = LIMITS) -> SandboxOutcome:
    return asyncio.run(run_sandboxed(code, limits))


def sandbox_processes() -> list[str]:
    """Command lines of this machine's processes that belong to a sandbox: its launcher or a program."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # the process ended while we looked
            continue
        if LAUNCHER_MARK in text or SCRIPT in text:
            found.append(text[:200])
    return found


@needs_sandbox
def test_a_program_prints_and_exits() -> None:
    outcome = run("print('hello')\nprint(6 * 7)")
    assert (outcome.exit_code, outcome.stopped, outcome.output) == (0, None, "hello\n42\n")
    assert describe(outcome, LIMITS) == "Exit code 0. Output (stdout and stderr):\nhello\n42\n"
    assert describe(run("x = 1"), LIMITS) == "Exit code 0. No output."


@needs_sandbox
def test_an_exception_gives_its_traceback_and_exit_code() -> None:
    outcome = run("import sys\nprint('before', file=sys.stderr)\n1 / 0")
    assert (outcome.exit_code, outcome.stopped) == (1, None)
    assert outcome.output.startswith("before\nTraceback (most recent call last):\n")
    assert f'File "{SCRIPT}", line 3' in outcome.output and "    1 / 0" in outcome.output
    assert outcome.output.endswith("ZeroDivisionError: division by zero\n")
    assert describe(outcome, LIMITS).startswith("Exit code 1. Output")


@needs_sandbox
def test_an_endless_loop_is_stopped_by_the_cpu_limit() -> None:
    outcome = run("print('spinning')\nwhile True: pass")
    assert outcome.stopped == StopReason.CPU_TIME and outcome.output == "spinning\n"
    assert describe(outcome, LIMITS).startswith("Stopped: CPU time limit of 1 s exceeded. Output")


@needs_sandbox
def test_a_sleep_is_stopped_by_the_wall_clock() -> None:
    limits = SandboxLimits(cpu_s=1, wall_s=1.5)
    start = time.monotonic()
    outcome = run("import time\nprint('sleeping')\ntime.sleep(10**6)", limits)
    assert time.monotonic() - start < 5
    assert outcome.stopped == StopReason.WALL_CLOCK and outcome.output == "sleeping\n"
    assert describe(outcome, limits).startswith("Stopped: wall-clock limit of 1.5 s reached; the program was "
                                                "killed. Output")
    assert sandbox_processes() == []


@needs_sandbox
def test_a_fork_bomb_fails_its_forks_and_leaves_no_process() -> None:
    limits = chz.replace(LIMITS, max_output_bytes=2**20)  # room for the tracebacks of every failed fork
    start = time.monotonic()
    outcome = run("import os\nwhile True: os.fork()", limits)
    assert time.monotonic() - start < LIMITS.wall_s  # stopped by the process limit, not the clock
    assert outcome.stopped == StopReason.PROCESSES, outcome
    assert "[Errno 11] Resource temporarily unavailable" in outcome.output
    assert "process limit of 8 processes and threads reached" in describe(outcome, limits)
    assert sandbox_processes() == []


@pytest.mark.parametrize(("output", "stopped"), [
    # One process's traceback: its last line names the exception and the errno.
    (f"Traceback (most recent call last):\n  File \"{SCRIPT}\", line 2, in <module>\n"
     "BlockingIOError: [Errno 11] Resource temporarily unavailable\n", StopReason.PROCESSES),
    # Several at once, written in pieces under `python -u` (seen in CI): the name and the message of
    # the last line landed apart.
    ("Traceback (most recent call last):\nTraceback (most recent call last):\nBlockingIOError"
     "BlockingIOError: [Errno 11] Resource temporarily unavailable\n: [Errno 11] Resource temporarily "
     "unavailable\n", StopReason.PROCESSES),
    ("Traceback (most recent call last):\nRuntimeError: can't start new thread\n", StopReason.PROCESSES),
    ("Traceback (most recent call last):\nMemoryError\n", StopReason.MEMORY),
    ("Traceback (most recent call last):\nOSError: [Errno 28] No space left on device\n", StopReason.DISK),
    # A limit's error caught, then another exception raised: the program did not end by the limit.
    ("BlockingIOError: [Errno 11] Resource temporarily unavailable\nTraceback (most recent call last):\n"
     "ValueError: bad input\n", None),
    ("Traceback (most recent call last):\nKeyError: 'x'\n", None),
    ("no traceback at all\n", None),
])
def test_the_limit_behind_an_exit_is_read_from_its_last_error_line(output: str,
                                                                    stopped: StopReason | None) -> None:
    assert _limit_raised(output) == stopped


@needs_sandbox
def test_a_process_left_behind_ends_with_the_program() -> None:
    start = time.monotonic()
    outcome = run("import os, time\nif os.fork() == 0:\n    time.sleep(10**6)\nprint('parent done')")
    assert (outcome.exit_code, outcome.output) == (0, "parent done\n")
    assert time.monotonic() - start < LIMITS.wall_s
    assert sandbox_processes() == []


@needs_sandbox
def test_allocating_10_gb_fails_with_a_memory_error() -> None:
    outcome = run("b = bytearray(10 * 2**30)")
    assert (outcome.exit_code, outcome.stopped) == (1, StopReason.MEMORY)
    assert outcome.output.endswith("MemoryError\n")
    assert describe(outcome, LIMITS).startswith("Exit code 1 (memory limit of 256 MiB reached). Output")


@needs_sandbox
def test_host_files_cannot_be_read() -> None:
    paths = ["/etc/passwd", "/etc/hostname", str(Path.home() / ".bashrc"), __file__, "/proc/self/environ"]
    code = textwrap.dedent(f"""\
        import os
        for path in {paths!r}:
            try:
                print(open(path).read())
            except OSError as exc:
                print('refused', type(exc).__name__)
        print(sorted(os.listdir('/')))""")
    outcome = run(code)
    assert outcome.exit_code == 0 and "root:" not in outcome.output
    *refusals, listing = outcome.output.splitlines()
    assert refusals == ["refused FileNotFoundError"] * len(paths)
    assert not {"etc", "home", "proc", "sys", "tmp", "work"} & set(ast.literal_eval(listing))


@needs_sandbox
def test_there_is_no_network() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]
        code = textwrap.dedent(f"""\
            import socket
            try:
                socket.create_connection(('127.0.0.1', {port}), timeout=2)
            except OSError as exc:
                print('connect:', exc)
            try:
                socket.getaddrinfo('example.com', 80)
            except OSError as exc:
                print('resolve:', type(exc).__name__)""")
        outcome = run(code)
        with pytest.raises(BlockingIOError):  # nobody knocked
            listener.accept()
    assert outcome.output == "connect: [Errno 101] Network is unreachable\nresolve: gaierror\n"


@needs_sandbox
def test_nothing_outside_the_working_folder_can_be_written() -> None:
    name = f"escape-{uuid.uuid4().hex}"
    targets = [Path(tempfile.gettempdir()) / name, Path(__file__).parent / name, Path(sys.base_prefix) / name,
               Path("/") / name]
    code = textwrap.dedent(f"""\
        for path in {[str(t) for t in targets]!r}:
            try:
                open(path, 'w').write('out')
                print('WROTE', path)
            except OSError as exc:
                print('refused', exc.strerror)""")
    outcome = run(code)
    assert "WROTE" not in outcome.output and outcome.output.count("refused") == len(targets)
    assert not any(target.exists() for target in targets)


@needs_sandbox
def test_the_program_cannot_regain_privileges_or_leave_its_namespaces() -> None:
    code = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
attempts = {
    "remount / writable": lambda: libc.mount(None, b"/", None, 32 | 4096, None),
    "mount proc": lambda: libc.mount(b"proc", b"/sandbox", b"proc", 0, None),
    "chroot": lambda: libc.chroot(b"/sandbox"),
    "new user namespace": lambda: libc.unshare(0x10000000),
    "setuid 0": lambda: libc.setuid(0),
}
for name, attempt in attempts.items():
    print(name, "succeeded" if attempt() == 0 else "failed")
print("uid", os.getuid(), "pid", os.getpid())
"""
    outcome = run(code)
    assert "succeeded" not in outcome.output and outcome.output.count("failed") == 5, outcome.output
    assert outcome.output.endswith("uid 1000 pid 2\n")  # pid 1 is the sandbox's init


@needs_sandbox
def test_the_working_folder_is_writable_and_private_to_one_run() -> None:
    name = f"note-{uuid.uuid4().hex}.txt"
    first = run(f"import os\nopen({name!r}, 'w').write('kept')\nprint(open({name!r}).read(), os.getcwd())")
    assert first.output == "kept /sandbox\n"
    second = run("import os\nprint(sorted(os.listdir('.')))")
    assert second.output == "['main.py']\n"  # a fresh folder: the first run's file went with its sandbox
    assert not (Path("/sandbox") / name).exists() and not list(Path(tempfile.gettempdir()).glob(f"*/{name}"))


@needs_sandbox
def test_a_full_working_folder_says_so() -> None:
    outcome = run("open('big', 'wb').write(b'x' * 20 * 2**20)")
    assert outcome.stopped == StopReason.DISK and "[Errno 28] No space left on device" in outcome.output
    assert "the working folder's limit of 8 MiB is full" in describe(outcome, LIMITS)


@needs_sandbox
def test_huge_output_is_cut_at_the_cap() -> None:
    outcome = run("print('x' * 10**8)")
    assert outcome.stopped == StopReason.OUTPUT and outcome.output == "x" * LIMITS.max_output_bytes
    assert describe(outcome, LIMITS).startswith("Stopped: output cut at 2000 bytes; the rest was discarded")
    assert sandbox_processes() == []


@needs_sandbox
def test_as_a_tool() -> None:
    runner = PythonRunner(LIMITS)
    printing = ToolCall.of("run_python", {"code": "print(2 ** 10)"})
    result = asyncio.run(handle_tool_call([runner.run_python], printing))
    assert result.error is None and result.metrics == {"ok": 1.0}
    assert result.messages[0]["content"] == "Exit code 0. Output (stdout and stderr):\n1024\n"
    looping = ToolCall.of("run_python", {"code": "while True: pass"})
    stopped = asyncio.run(handle_tool_call([runner.run_python], looping))
    assert stopped.error is None and stopped.metadata["stopped"] == StopReason.CPU_TIME
    assert stopped.messages[0]["content"] == "Stopped: CPU time limit of 1 s exceeded. No output."


@needs_sandbox
def test_a_tool_call_past_its_timeout_kills_the_sandbox() -> None:
    runner = PythonRunner(LIMITS)
    sleeping = ToolCall.of("run_python", {"code": "import time\ntime.sleep(10**6)"})
    result = asyncio.run(handle_tool_call([runner.run_python], sleeping, ToolLimits(timeout_s=0.5)))
    assert result.error == ToolErrorKind.TIMEOUT
    assert sandbox_processes() == []


@pytest.mark.skipif(PROBLEM is not None or shutil.which("unshare") is None,
                    reason="needs a working sandbox and util-linux unshare to take it away")
def test_without_user_namespaces_the_runner_refuses_clearly() -> None:
    # In a user namespace whose max_user_namespaces is 0, the sandbox's unshare(2) is refused.
    check = "from tool_use.python_runner import PythonRunner\nPythonRunner()"
    script = f"echo 0 > /proc/sys/user/max_user_namespaces && exec {sys.executable} -c '{check}'"
    done = subprocess.run(["unshare", "--user", "--map-root-user", "sh", "-c", script], capture_output=True,
                          text=True, cwd=Path(__file__).parents[2], timeout=60)
    assert done.returncode != 0
    assert ("SandboxUnavailable: The Python sandbox cannot run on this machine: the kernel refused to create "
            "namespaces (unshare: No space left on device): user.max_user_namespaces is 0") in done.stderr
    assert "never runs code unsandboxed" in done.stderr


def test_limits_must_be_positive() -> None:
    with pytest.raises(ConfigurationError, match="must all be positive"):
        SandboxLimits(cpu_s=0)
    with pytest.raises(ConfigurationError, match="max_processes must be at least 3"):
        SandboxLimits(max_processes=2)
