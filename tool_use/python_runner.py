"""Run Python code the model wrote, in a sandbox of its own, as a tool the policy can call.

    runner = PythonRunner(SandboxLimits(cpu_s=5))      # ConfigurationError where the kernel cannot sandbox
    tools = [runner.run_python, calculator]
    outcome = await run_sandboxed("print(2 ** 10)", SandboxLimits())   # the same, without the tool

Each call starts a fresh interpreter (this one, `sys.executable` resolved, run as `python -I -S -X utf8
-u`: the standard library only, no site-packages, no `PYTHON*` variables) in a separate process tree and
returns what it printed, stdout and stderr interleaved as written, with its exit code or why it was
stopped. Nothing is kept between calls.

Isolation (Linux; no root, no setuid helper, no dependency but the C library through `ctypes`). A small
launcher, run by the same interpreter, enters new user, mount, network, PID, IPC, UTS and cgroup
namespaces (`unshare(2)`) mapping a single id: the caller's uid and gid, or `nobody` (65534) when the
caller is root, so the code never runs as the host's root. In the new mount namespace it builds a root
on a tmpfs holding read-only bind mounts of the Python install prefix, `/usr/lib`, `/usr/lib64`, `/lib*`
and `/dev/{null,zero,random,urandom}`, and nothing else (no `/etc`, `/home`, `/proc`, `/sys`, `/tmp`),
then `pivot_root(2)`s into it and detaches the old root, so no path leads back to the host's files. (A
Python installed under a home folder brings that one folder, not the rest of the home.) The working
folder, `/sandbox`, is a fresh tmpfs of `disk_mib` and the only writable place; it exists in the
sandbox's mount namespace only and vanishes with it, so nothing reaches the host's disk and there is
nothing to clean up, even after a crash here. The program runs as the mapped id with no capabilities
(the exec drops them: the id is not 0), `PR_SET_NO_NEW_PRIVS`, stdin from `/dev/null`, a new session
keyring, no nested user namespaces (`user.max_user_namespaces` is 0 inside), and five environment
variables of its own (PATH, HOME, TMPDIR, LANG, MALLOC_ARENA_MAX; none of the host's, so no API key
leaks in). Its network namespace holds only a loopback device that is down: no connection to anything,
the host included, and no name resolution.

Where the kernel refuses user namespaces (`kernel.unprivileged_userns_clone=0`, Ubuntu's
`kernel.apparmor_restrict_unprivileged_userns=1`, `user.max_user_namespaces=0`, a container whose
seccomp profile blocks `unshare`), `PythonRunner` raises `SandboxUnavailable` saying so; code is never
run unsandboxed. `sandbox_problem()` tells in advance (tests skip on it).

Limits (`SandboxLimits`; defaults in parentheses). The output and the wall clock are watched from here;
the rest are enforced by the kernel in the sandbox:
    cpu_s (10)              RLIMIT_CPU of each process: SIGXCPU when it is spent, SIGKILL a second later.
    wall_s (20)             from the start; then the whole tree is killed: SIGKILL to the launcher's
                            process group, and the PID namespace's init dies with it, which makes the
                            kernel kill every process in the namespace, however it was started.
    memory_mib (512)        RLIMIT_AS (address space) of each process; an allocation past it fails, in
                            Python with MemoryError.
    max_processes (16)      RLIMIT_NPROC, which the kernel (5.14 and later) counts per user namespace,
                            so it is this sandbox's processes and threads only; a fork past it fails
                            with EAGAIN. It binds because the code never runs as root (see above).
    disk_mib (64)           the size of the working folder's tmpfs; writing past it fails with ENOSPC.
    max_output_bytes (6000) read back, stdout and stderr together; at the cap the program is killed and
                            the rest discarded, so a runaway print costs at most this much memory here.
The program's main process ending ends the sandbox: any process it left behind is killed with the
namespace. The result names the limit that stopped the program, or the one its last exception came
from (MemoryError, a failed fork, a full disk).

What it does not stop:
    - Kernel bugs. There is no seccomp filter: the program may make any system call, and user
      namespaces expose more of the kernel to unprivileged code. This contains mistakes and mischief
      from a policy model, not a determined attacker with a kernel exploit; use a VM (gVisor,
      Firecracker) for code from people.
    - What the kernel tells any process: `uname`, `sysinfo` (host memory, uptime, load), the CPU model,
      the time. The Python install and the system libraries can be read, not changed.
    - Resource use within the limits: the limits are per process, so memory and CPU add up across
      `max_processes` processes (at most about `max_processes * memory_mib`, plus `disk_mib` of tmpfs,
      which is memory of the host's and is not counted in RLIMIT_AS). CPU contention with the trainer,
      memory bandwidth and caches, and timing side channels are not isolated.
    - On kernels older than 5.14, RLIMIT_NPROC counts all processes of the mapped uid, not only the
      sandbox's; under root the mapped uid is `nobody`, elsewhere the caller's own.
    - Third-party packages: only the standard library is importable. There is no `/proc`, so code
      that reads it (`multiprocessing`'s semaphores, `psutil`-like probes) fails.
"""

import asyncio
import concurrent.futures
import errno
import functools
import json
import os
import platform
import re
import signal
import sys
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

import chz

from recipes_lib.exceptions import ConfigurationError, RecipesError
from tool_use.tools import error_tool_result, simple_tool_result, tool
from tool_use.types import ToolResult

WORKDIR = "/sandbox"  # the program's working folder (and HOME, TMPDIR) inside the sandbox
SCRIPT = f"{WORKDIR}/main.py"  # the code as a file, so a traceback quotes its lines
LAUNCHER_MARK = "recipes-python-sandbox"  # argv[1] of the launcher: how to find one in a process list
SANDBOX_ID = 1000  # the uid and gid the program sees
NOBODY = 65534  # the host uid and gid a root caller's sandbox runs as
# (pivot_root, keyctl) system call numbers; glibc wraps neither.
_SYSCALLS = {"x86_64": (155, 250), "aarch64": (41, 219), "riscv64": (41, 219)}
_DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
_LIBRARIES = ("/usr/lib", "/usr/lib64", "/usr/lib32", "/lib", "/lib64", "/lib32")
_READ_CHUNK = 65536
# What the kernel means when it refuses the namespaces, by errno.
_REFUSALS = {
    errno.EPERM: "unprivileged user namespaces are disabled (sysctl kernel.unprivileged_userns_clone=0 on "
                 "Debian, kernel.apparmor_restrict_unprivileged_userns=1 on Ubuntu 24.04) or blocked by a "
                 "seccomp policy (a container's default one)",
    errno.ENOSPC: "user.max_user_namespaces is 0 (or all of them are in use)",
    errno.EUSERS: "user.max_user_namespaces is 0 (or all of them are in use)",
    errno.EINVAL: "the kernel was built without user, network or PID namespaces",
}
_SETUP_TIMEOUT_S = 30.0  # for `sandbox_problem`'s trial run, on a loaded machine
_DRAIN_S = 2.0  # after a kill, the time the killed processes get to let go of the output pipe


class SandboxUnavailable(ConfigurationError):
    """This machine cannot run the sandbox (the message says what is missing); nothing runs unsandboxed."""


class SandboxError(RecipesError, RuntimeError):
    """The sandbox of one call could not be set up (the message says which step failed)."""


@chz.chz
class SandboxLimits:
    """Bounds on one run of the sandbox (see the module docstring for how each is enforced)."""

    # CPU seconds per process: a loop that never ends, stopped well before the wall clock.
    cpu_s: int = 10
    # Seconds from the start until the whole process tree is killed (a sleep, a blocked read). Below
    # `ToolLimits.timeout_s` (30) so the sandbox, not the tool timeout, says why the program stopped.
    wall_s: float = 20.0
    # Address space per process, in MiB: the interpreter needs about 30, so room for real data.
    memory_mib: int = 512
    # Processes and threads in the sandbox, its init and (unless root started it) its launcher
    # included: a fork bomb fails its forks, and the program can still start a few workers.
    max_processes: int = 16
    # The working folder's size, in MiB (a tmpfs: memory of the host's, so kept small).
    disk_mib: int = 64
    # Bytes of output read back; below `ToolLimits.max_output_chars` (8000) so the status line and
    # the output reach the model whole.
    max_output_bytes: int = 6000

    @chz.validate
    def _check(self) -> None:
        sizes = {"cpu_s": self.cpu_s, "wall_s": self.wall_s, "memory_mib": self.memory_mib,
                 "max_processes": self.max_processes, "disk_mib": self.disk_mib,
                 "max_output_bytes": self.max_output_bytes}
        bad = {name: value for name, value in sizes.items() if not value > 0}
        if bad:
            raise ConfigurationError(f"SandboxLimits must all be positive; got {bad}.")
        if self.max_processes < 3:
            raise ConfigurationError(f"SandboxLimits.max_processes must be at least 3 (the launcher, the "
                                     f"sandbox's init and the program); got {self.max_processes}.")


class StopReason(StrEnum):
    """Which limit ended the program: the first three are enforced by killing it, the others are read
    from the exception it ended with."""

    CPU_TIME = "cpu_time"
    WALL_CLOCK = "wall_clock"
    OUTPUT = "output"
    MEMORY = "memory"
    PROCESSES = "processes"
    DISK = "disk"


@dataclass(frozen=True)
class SandboxOutcome:
    """How one run ended.

    Attributes:
        output: stdout and stderr as written, at most `max_output_bytes` (bad UTF-8 replaced).
        exit_code: the program's exit status; None when a signal ended it.
        signal: the signal that ended it (SIGXCPU for the CPU limit, SIGKILL for the hard one).
        stopped: the limit that ended it; None when it ended on its own (an exception included).
        cpu_s: CPU seconds of its main process; None when the sandbox was killed from here.
    """

    output: str
    exit_code: int | None
    signal: int | None
    stopped: StopReason | None
    cpu_s: float | None


@dataclass(frozen=True)
class _Report:
    """What the launcher wrote on its status pipe: a setup failure, or the program's wait status."""

    setup_error: str | None = None
    refused_errno: int | None = None  # set when the kernel refused the namespaces
    wait_status: int | None = None
    cpu_s: float | None = None


class PythonRunner:
    """The `run_python` tool under one set of limits: `PythonRunner(limits).run_python`.

    Calls share nothing but the limits, so one runner may serve every episode of a run.
    """

    def __init__(self, limits: SandboxLimits | None = None) -> None:
        """Raises:
        SandboxUnavailable: this machine cannot run the sandbox (see `sandbox_problem`).
        """
        problem = sandbox_problem()
        if problem is not None:
            raise SandboxUnavailable(f"The Python sandbox cannot run on this machine: {problem}. It "
                                     "never runs code unsandboxed: make the kernel allow it, or leave "
                                     "run_python out.")
        self.limits = limits or SandboxLimits()

    @tool
    async def run_python(
        self,
        code: Annotated[str, "a complete Python 3 program; print what you want to see"],
    ) -> ToolResult:
        """Run a Python program in a fresh sandbox and return what it printed (stdout and stderr) with its
        exit code. Standard library only; no network; files only in the working folder, which starts
        empty each call. Limits on CPU time, memory, processes, output and wall-clock time apply, and the
        result says which one stopped the program."""
        try:
            outcome = await run_sandboxed(code, self.limits)
        except (SandboxError, SandboxUnavailable) as exc:  # e.g. user.max_user_namespaces used up
            return error_tool_result(str(exc))
        metadata = {"exit_code": outcome.exit_code, "stopped": outcome.stopped}
        return simple_tool_result(describe(outcome, self.limits), metadata=metadata,
                                  metrics={"ok": float(outcome.exit_code == 0)})


async def run_sandboxed(code: str, limits: SandboxLimits) -> SandboxOutcome:
    """Run `code` as a program in a new sandbox (see the module docstring), within `limits`.

    Raises:
        SandboxUnavailable: the kernel refused the namespaces.
        SandboxError: another step of the setup failed.
    """
    status_r, status_w = os.pipe()
    try:
        try:
            process = await asyncio.create_subprocess_exec(
                _python(), "-I", "-S", "-X", "utf8", "-c", _LAUNCHER, LAUNCHER_MARK, env={},
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, pass_fds=(status_w,), start_new_session=True)
        finally:
            os.close(status_w)
        output = bytearray()
        stopped = await _watch(process, _launch_config(code, limits, status_w), output, limits)
        report = _read_report(status_r)
    finally:
        os.close(status_r)
    return _outcome(output, stopped, report, limits)


async def _watch(process: asyncio.subprocess.Process, config: bytes, output: bytearray,
                 limits: SandboxLimits) -> StopReason | None:
    """Feed the launcher its config and collect the output into `output` until the process ends, the
    output cap or the wall clock; kill the process tree on the way out unless it ended by itself."""
    assert process.stdin is not None and process.stdout is not None
    try:
        async with asyncio.timeout(limits.wall_s):
            try:
                process.stdin.write(config)
                await process.stdin.drain()
                process.stdin.close()
            except ConnectionError:  # the launcher died before reading: its report says why
                pass
            if await _read_capped(process.stdout, output, limits.max_output_bytes):
                return StopReason.OUTPUT
            await process.wait()
            return None
    except TimeoutError:
        return StopReason.WALL_CLOCK
    finally:
        if process.returncode is None:  # also when the call is cancelled (`ToolLimits.timeout_s`)
            _kill_group(process.pid)
            await process.wait()
            await _drain(process.stdout)


async def _drain(stream: asyncio.StreamReader) -> None:
    """Discard what is left in `stream` until its end of file: the sandbox's processes hold the pipe,
    so then they are gone (or SIGKILLed and, holding nothing, about to be)."""
    try:
        async with asyncio.timeout(_DRAIN_S):
            while await stream.read(_READ_CHUNK):
                pass
    except TimeoutError:  # a dying process still holds the pipe; it cannot run anything more
        pass


async def _read_capped(stream: asyncio.StreamReader, into: bytearray, max_bytes: int) -> bool:
    """Append what `stream` yields to `into` until end of file (False) or until more than `max_bytes`
    came (True; `into` then holds exactly `max_bytes`)."""
    while chunk := await stream.read(_READ_CHUNK):
        if len(into) + len(chunk) > max_bytes:
            into += chunk[: max_bytes - len(into)]
            return True
        into += chunk
    return False


def _kill_group(pgid: int) -> None:
    """SIGKILL the launcher's process group; its PID namespace's init is in it, so the kernel then
    kills every process of the sandbox, those that left the group included."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _read_report(status_r: int) -> _Report:
    """The launcher's last report; written before it exits, so reading never waits."""
    os.set_blocking(status_r, False)
    data = bytearray()
    try:
        while chunk := os.read(status_r, _READ_CHUNK):
            data += chunk
    except BlockingIOError:  # a process of the launcher was killed while holding the pipe
        pass
    lines = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
    errors = [line for line in lines if "setup_error" in line]
    if errors:
        return _Report(setup_error=errors[0]["setup_error"], refused_errno=errors[0].get("refused"))
    return _Report(wait_status=lines[-1]["wait_status"], cpu_s=lines[-1]["cpu_s"]) if lines else _Report()


def _outcome(output: bytearray, stopped: StopReason | None, report: _Report,
             limits: SandboxLimits) -> SandboxOutcome:
    """The outcome from what was read here and what the launcher reported."""
    text = output.decode("utf-8", errors="replace")
    if stopped is not None:
        return SandboxOutcome(text, None, None, stopped, None)
    if report.refused_errno is not None:
        hint = _REFUSALS.get(report.refused_errno, "see unshare(2)")
        raise SandboxUnavailable(f"{report.setup_error}: {hint}")
    if report.setup_error is not None:
        raise SandboxError(f"the Python sandbox could not be set up: {report.setup_error}")
    if report.wait_status is None:
        raise SandboxError(f"the Python sandbox's launcher ended without a report; its output ends "
                           f"{text[-500:]!r}")
    code = os.waitstatus_to_exitcode(report.wait_status)
    if code < 0:
        cpu_spent = report.cpu_s is not None and report.cpu_s >= limits.cpu_s
        by_cpu = -code == signal.SIGXCPU or (-code == signal.SIGKILL and cpu_spent)
        return SandboxOutcome(text, None, -code, StopReason.CPU_TIME if by_cpu else None, report.cpu_s)
    return SandboxOutcome(text, code, None, _limit_raised(text) if code else None, report.cpu_s)


_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(Error|Exception)\b")
# What the last line of a traceback that a limit causes holds, and the limit. Searched for anywhere in
# a line: under `-u` a traceback's last line is written in pieces (the exception's name, then ": ",
# then its message), so several processes failing at once can split "BlockingIOError" from its
# "[Errno 11] ..." or glue it to another process's line.
_LIMIT_ERRORS = (
    (re.compile(r"MemoryError\b"), StopReason.MEMORY),
    (re.compile(r"\[Errno 11\] Resource temporarily unavailable|can't start new thread"), StopReason.PROCESSES),
    (re.compile(r"\[Errno 28\] No space left on device"), StopReason.DISK),
)


def _limit_raised(output: str) -> StopReason | None:
    """The limit behind the exception the program ended with, if any: read from the last line that
    names an exception or a limit's error (not simply the last line: the tracebacks of several
    processes interleave)."""
    for line in reversed(output.splitlines()):
        reason = next((reason for pattern, reason in _LIMIT_ERRORS if pattern.search(line)), None)
        if reason is not None or _EXCEPTION_LINE.match(line):
            return reason
    return None


def describe(outcome: SandboxOutcome, limits: SandboxLimits) -> str:
    """The text the model reads: a status line (how the program ended, and why when a limit ended it),
    then its output."""
    why = {
        StopReason.CPU_TIME: f"CPU time limit of {limits.cpu_s} s exceeded",
        StopReason.WALL_CLOCK: f"wall-clock limit of {limits.wall_s:g} s reached; the program was killed",
        StopReason.OUTPUT: f"output cut at {limits.max_output_bytes} bytes; the rest was discarded and the "
                           "program killed",
        StopReason.MEMORY: f"memory limit of {limits.memory_mib} MiB reached",
        StopReason.PROCESSES: f"process limit of {limits.max_processes} processes and threads reached",
        StopReason.DISK: f"the working folder's limit of {limits.disk_mib} MiB is full",
    }
    if outcome.exit_code is not None:
        status = f"Exit code {outcome.exit_code}" + (f" ({why[outcome.stopped]})" if outcome.stopped else "")
    elif outcome.stopped is not None:
        status = f"Stopped: {why[outcome.stopped]}"
    else:
        assert outcome.signal is not None, outcome
        status = f"Killed by signal {signal.Signals(outcome.signal).name}"
    if not outcome.output:
        return f"{status}. No output."
    return f"{status}. Output (stdout and stderr):\n{outcome.output}"


@functools.cache
def sandbox_problem() -> str | None:
    """None when this machine can run the sandbox; otherwise what is missing, in a sentence.

    Runs a trial program once per process (a fraction of a second).
    """
    if sys.platform != "linux":
        return f"it needs Linux namespaces, and this is {sys.platform}"
    if platform.machine() not in _SYSCALLS:
        return f"it knows the system calls of {sorted(_SYSCALLS)} only, and this is {platform.machine()}"
    try:
        _python()
    except SandboxUnavailable as exc:
        return str(exc)
    limits = SandboxLimits(cpu_s=5, wall_s=_SETUP_TIMEOUT_S)
    # A thread of its own: the caller may be inside an event loop, where asyncio.run cannot start.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            outcome = pool.submit(asyncio.run, run_sandboxed("print('ok')", limits)).result()
        except (SandboxError, SandboxUnavailable) as exc:
            return str(exc)
    if outcome.exit_code != 0 or outcome.output != "ok\n":
        return f"a trial program failed: {describe(outcome, limits)}"
    return None


def _python() -> str:
    """The interpreter itself (a virtual environment's `python` is a link to it)."""
    if not sys.executable:
        raise SandboxUnavailable("sys.executable is empty, so there is no interpreter to run the code with")
    return os.path.realpath(sys.executable)


def _launch_config(code: str, limits: SandboxLimits, status_fd: int) -> bytes:
    """The launcher's instructions, as JSON."""
    python = _python()
    binds = _distinct_roots([sys.base_prefix, os.path.dirname(python), *_LIBRARIES, *_DEVICES])
    pivot_root, keyctl = _SYSCALLS[platform.machine()]
    host_id = (NOBODY, NOBODY) if os.geteuid() == 0 else (os.geteuid(), os.getegid())
    cpu_s, memory = limits.cpu_s, limits.memory_mib * 2**20
    config = {
        "code": code,
        "python": python,
        "status_fd": status_fd,
        "host_id": host_id,
        "sandbox_id": SANDBOX_ID,
        "binds": [path for path in binds if not os.path.islink(path)],
        "links": [(path, os.readlink(path)) for path in binds if os.path.islink(path)],
        "workdir": WORKDIR,
        "script": SCRIPT,
        "disk_bytes": limits.disk_mib * 2**20,
        "syscalls": {"pivot_root": pivot_root, "keyctl": keyctl},
        # (soft, hard): SIGXCPU at the soft CPU limit, SIGKILL at the hard one if SIGXCPU is caught.
        "rlimits": [("RLIMIT_CPU", (cpu_s, cpu_s + 1)), ("RLIMIT_AS", (memory, memory)),
                    ("RLIMIT_NPROC", (limits.max_processes,) * 2), ("RLIMIT_CORE", (0, 0)),
                    ("RLIMIT_NOFILE", (256, 256))],
        "env": {"PATH": os.path.dirname(python), "HOME": WORKDIR, "TMPDIR": WORKDIR, "LANG": "C.UTF-8",
                # glibc reserves 64 MiB of address space per thread arena, which RLIMIT_AS counts.
                "MALLOC_ARENA_MAX": "2"},
    }
    return json.dumps(config).encode()


def _distinct_roots(paths: list[str]) -> list[str]:
    """The paths that exist, less those inside another one (a bind mount brings its subfolders)."""
    found = sorted({os.path.normpath(p) for p in paths if os.path.lexists(p)})
    return [p for p in found if not any(p.startswith(q.rstrip("/") + "/") for q in found if q != p)]


# The launcher, run as `python -I -S -c _LAUNCHER` with its config on stdin. It cannot import this
# package (no site-packages under -I -S), hence a program in a string; tests/tool_use run it for real.
# Processes: the launcher (in the host's PID namespace) -> a helper that writes the id maps from
# outside, and init (PID 1 of the new namespace: builds the root, reaps) -> the program.
_LAUNCHER = r'''
import ctypes, json, os, resource, signal, stat, sys

config = json.loads(sys.stdin.buffer.read())
STATUS = config["status_fd"]
ID = config["sandbox_id"]
NEW_ROOT = "/tmp"  # a tmpfs is mounted here, in the new mount namespace only
CLONE_FLAGS = 0x10000000 | 0x20000 | 0x40000000 | 0x20000000 | 0x08000000 | 0x04000000 | 0x02000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_NOATIME, MS_NODIRATIME = 1, 2, 4, 32, 1024, 2048
MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 4096, 16384, 1 << 18, 1 << 21, 1 << 24
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, MNT_DETACH, KEYCTL_JOIN_SESSION = 1, 4, 38, 2, 1
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
libc.syscall.restype = ctypes.c_long


def report(**fields):
    os.write(STATUS, json.dumps(fields).encode() + b"\n")


def check(result, doing):
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{doing}: {os.strerror(errno)}")


def mount(source, target, fstype, flags, data=None):
    encoded = [None if s is None else os.fsencode(s) for s in (source, target, fstype, data)]
    check(libc.mount(*encoded[:3], flags, encoded[3]), f"mount {target}")


def main():
    """Enter the namespaces, start init in them, and wait for it."""
    try:
        if not enter_namespaces():
            return 1
    except OSError as exc:
        report(setup_error=f"the kernel refused to create namespaces (unshare: {exc.strerror})",
               refused=exc.errno)
        return 1
    init = os.fork()
    if init == 0:
        os._exit(run_init())
    os.waitpid(init, 0)
    return 0


def enter_namespaces():
    """unshare(2) into new namespaces; a helper left outside writes the id maps (as newuidmap would),
    because only a process of the parent namespace may map a root caller to nobody."""
    if os.geteuid() == 0:
        try:
            os.setgroups([])  # root's supplementary groups would otherwise come along
        except PermissionError:  # root of a user namespace that denies setgroups: it has none of root's
            pass
    ready_r, ready_w = os.pipe()
    helper = os.fork()
    if helper == 0:
        os.close(ready_w)
        if os.read(ready_r, 1):
            try:
                write_id_maps(os.getppid())
            except OSError as exc:
                report(setup_error=f"cannot map the sandbox's user id ({exc})")
                os._exit(1)
        os._exit(0)
    os.close(ready_r)
    failed = libc.unshare(CLONE_FLAGS) != 0
    errno = ctypes.get_errno()
    if not failed:
        os.write(ready_w, b"1")
    os.close(ready_w)
    _, status = os.waitpid(helper, 0)
    if failed:
        raise OSError(errno, os.strerror(errno))
    return status == 0


def write_id_maps(pid):
    uid, gid = config["host_id"]
    for name, text in (("setgroups", "deny"), ("uid_map", f"{ID} {uid} 1"), ("gid_map", f"{ID} {gid} 1")):
        with open(f"/proc/{pid}/{name}", "w") as file:
            file.write(text)


def run_init():
    """PID 1 of the new namespace: build the root, start the program, reap until it ends, report."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the launcher killed -> init, and so all
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # the kernel then shields init from the program's signals
    os.set_inheritable(STATUS, False)
    try:
        build_root()
    except OSError as exc:
        report(setup_error=f"cannot build the sandbox's file system ({exc})")
        return 1
    program = os.fork()
    if program == 0:
        try:
            start_program()
        except OSError as exc:
            report(setup_error=f"cannot start the program ({exc})")
        os._exit(127)
    while True:
        pid, status, usage = os.wait4(-1, 0)
        if pid == program:
            report(wait_status=status, cpu_s=usage.ru_utime + usage.ru_stime)
            return 0


def build_root():
    """A tmpfs root holding read-only binds of the interpreter and libraries and a tmpfs workdir;
    pivot into it and drop the old root."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here reaches the host
    sources = [(path, os.open(path, os.O_PATH | os.O_CLOEXEC)) for path in config["binds"]]
    with open("/proc/sys/user/max_user_namespaces", "w") as file:  # per user namespace: no nested ones,
        file.write("0")                                          # so less of the kernel is in reach
    os.setresgid(ID, ID, ID)  # from here on a mapped id, so files can be made (a root caller: nobody)
    os.setresuid(ID, ID, ID)
    mount("tmpfs", NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4m")
    for path, fd in sources:
        bind_read_only(fd, NEW_ROOT + path)
    for path, target in config["links"]:
        os.symlink(target, NEW_ROOT + path)
    workdir = NEW_ROOT + config["workdir"]
    os.mkdir(workdir)
    mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=0700,size={config['disk_bytes']}")
    os.chdir(NEW_ROOT)
    check(libc.syscall(config["syscalls"]["pivot_root"], b".", b"."), "pivot_root")
    check(libc.umount2(b".", MNT_DETACH), "detaching the old root")
    os.chdir("/")
    mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    with open(config["script"], "w", encoding="utf-8", errors="surrogatepass") as file:
        file.write(config["code"])
    if libc.syscall(config["syscalls"]["keyctl"], KEYCTL_JOIN_SESSION, None) < 0 and ctypes.get_errno() != 38:
        check(-1, "joining a new session keyring")  # 38: ENOSYS, a kernel without keys


def bind_read_only(fd, target):
    """Bind the file or folder open as `fd` at `target`, read-only, keeping the flags the host's mount
    has (a user namespace may not clear them)."""
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    host = os.fstatvfs(fd).f_flag
    flags = MS_NOSUID | (host & (os.ST_NODEV | os.ST_NOEXEC))  # the MS_ and ST_ values agree
    flags |= MS_NOATIME if host & os.ST_NOATIME else MS_RELATIME if host & os.ST_RELATIME else MS_STRICTATIME
    flags |= MS_NODIRATIME if host & os.ST_NODIRATIME else 0
    mount(f"/proc/self/fd/{fd}", target, None, MS_BIND)
    mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | flags)
    os.close(fd)


def start_program():
    """Exec the program: limits set, no capabilities (the exec drops them: the id is not 0), no new ones."""
    for name, (soft, hard) in config["rlimits"]:
        resource.setrlimit(getattr(resource, name), (soft, hard))
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    stdin = os.open("/dev/null", os.O_RDONLY)
    os.dup2(stdin, 0)
    os.close(stdin)
    os.chdir(config["workdir"])
    python = config["python"]
    os.execve(python, [python, "-I", "-S", "-X", "utf8", "-u", config["script"]], config["env"])


sys.exit(main())
'''
