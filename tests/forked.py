"""`python -m ...`, `python -c ...` and `python script.py` for the tests, without an interpreter start-up each.

The tests that need a second process (SIGKILL mid-run, Ctrl-C, a served engine, a client in
another process) would each spend seconds importing torch, transformers, peft and the Tinker SDK
before their first step (docs/testing.md). Here a helper process per pytest worker, the zygote,
imports those once; each command is a child forked from it, which sets up its argv, environment,
working directory and standard streams and runs the command as `python` would, on its main thread.

`popen` returns a `subprocess.Popen` whose process is such a child: `pid`, `poll`, `wait`,
`communicate`, pipes, timeouts, `send_signal` and `returncode` (negative for the signal that
ended it) behave as Popen's; `run` is `subprocess.run`. A command the zygote cannot stand in for
starts a real interpreter instead: another executable or flags, or an environment that differs in
what a process reads once at start-up (`STARTUP_VARIABLES`: instruction sets, allocator, Python's
own, Hugging Face's), and every command when `RECIPES_TEST_FORK=0`.
"""

import atexit
import io
import json
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# Imported once by the zygote: what the commands the tests start spend their start-up on. Our own
# modules are included; none reads the environment when imported.
PRELOAD = (
    "torch", "numpy", "transformers", "transformers.modeling_utils", "peft", "tinker", "tinker.types", "httpx",
    "matplotlib.figure", "matplotlib.backends.backend_agg", "matplotlib.backends.backend_svg",
    "local_tinker.engine", "local_tinker.clients", "local_tinker.server.serve", "local_tinker.main_thread",
    "recipes_lib.summary", "recipes_lib.plot", "recipes_lib.report",
    "recipes.sl_basic", "recipes.rl_basic", "recipes.dpo_basic", "supervised.train", "rl.train", "preference.train_dpo",
)

# Read by torch, its kernels, the C allocator, Python or Hugging Face's libraries when a process
# starts or first imports them: a command whose environment sets any of these differently from the
# zygote's runs in a real interpreter. A child applies OMP_NUM_THREADS and PYTHONPATH itself.
STARTUP_VARIABLES = ("PYTHON", "OMP_", "KMP_", "GOMP_", "MKL_", "ATEN_", "ONEDNN_", "DNNL_", "TORCH", "LD_", "MALLOC_",
                     "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_", "LRU_CACHE_CAPACITY", "CUDA_")
THREADS_VARIABLE = "OMP_NUM_THREADS"
PATH_VARIABLE = "PYTHONPATH"

_HEADER = struct.Struct("!I")
_EXIT = struct.Struct("!i")


def _startup_environment(env: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in env.items()
            if key.startswith(STARTUP_VARIABLES) and key not in (THREADS_VARIABLE, PATH_VARIABLE)}


# ----------------------------------------------------------------------------------------------
# The test side


class _Zygote:
    """The zygote of this process: started at first use, stopped when this process exits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._folder: str | None = None
        self._socket_path: str | None = None
        self._environment: dict[str, str] = {}

    def address(self) -> tuple[str, dict[str, str]] | None:
        """The zygote's socket and the start-up environment it imported under; None if it failed to start."""
        with self._lock:
            if self._process is None:
                self._start()
            if self._process is None or self._process.poll() is not None or self._socket_path is None:
                return None
            return self._socket_path, self._environment

    def _start(self) -> None:
        folder = self._folder = tempfile.mkdtemp(prefix="recipes-zygote-")
        self._socket_path = os.path.join(folder, "socket")
        self._environment = _startup_environment(os.environ)
        log = open(os.path.join(folder, "zygote.log"), "wb")  # noqa: SIM115  kept open by the child
        self._process = subprocess.Popen([sys.executable, "-m", "tests.forked", self._socket_path], cwd=REPO,
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        atexit.register(self.stop)
        deadline = time.monotonic() + 300
        while not os.path.exists(self._socket_path + ".ready"):
            if self._process.poll() is not None or time.monotonic() > deadline:
                self._process.kill()
                sys.stderr.write(f"tests.forked: the zygote did not start; see {folder}/zygote.log\n")
                return
            time.sleep(0.02)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)


_ZYGOTE = _Zygote()


def _command(args: Sequence[str]) -> list[str] | None:
    """`args` as the zygote runs it (["-m", module, ...], ["-c", code, ...] or [script, ...]), or None."""
    if not args or str(args[0]) != sys.executable or len(args) < 2:
        return None
    rest = [os.fspath(arg) for arg in args[1:]]
    if rest[0] in ("-m", "-c"):
        return rest if len(rest) >= 2 else None
    if rest[0].startswith("-"):
        return None  # interpreter flags: a real interpreter
    return rest


class ForkedPopen(subprocess.Popen):  # type: ignore[type-arg]
    """A `subprocess.Popen` whose process the zygote forks (see the module docstring)."""

    _connection: socket.socket

    def _execute_child(self, args: Any, executable: Any, preexec_fn: Any, close_fds: Any, pass_fds: Any,
                       cwd: Any, env: Any, startupinfo: Any, creationflags: Any, shell: Any,
                       p2cread: int, p2cwrite: int, c2pread: int, c2pwrite: int, errread: int, errwrite: int,
                       *rest: Any) -> None:
        command = _command(args)
        address = _ZYGOTE.address()
        assert command is not None and address is not None and not shell and preexec_fn is None and not pass_fds
        socket_path, _ = address
        request = json.dumps({"argv": command, "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
                              "env": dict(env) if env is not None else dict(os.environ)}).encode()
        fds = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1,
               errwrite if errwrite != -1 else 2]
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(socket_path)
            socket.send_fds(connection, [_HEADER.pack(len(request))], fds)
            connection.sendall(request)
            self.pid = _EXIT.unpack(_receive(connection, _EXIT.size))[0]
        except BaseException:
            connection.close()
            raise
        finally:
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)
        self._connection = connection
        self._child_created = True

    def _exit_code(self, timeout: float | None) -> int | None:
        """The child's exit code once it has ended, waiting up to `timeout` s (None: no limit)."""
        ready = selectors.DefaultSelector()
        ready.register(self._connection, selectors.EVENT_READ)
        try:
            if not ready.select(timeout):
                return None
        finally:
            ready.close()
        data = _receive(self._connection, _EXIT.size)
        self._connection.close()
        return int(_EXIT.unpack(data)[0])

    def _internal_poll(self, _deadstate: int | None = None, *args: Any, **kwargs: Any) -> int | None:
        if self.returncode is None and self._waitpid_lock.acquire(False):
            try:
                if self.returncode is None:
                    code = self._exit_code(0)
                    if code is not None:
                        self.returncode = code
            except OSError:
                if _deadstate is not None:
                    self.returncode = _deadstate
            finally:
                self._waitpid_lock.release()
        return self.returncode

    def _wait(self, timeout: float | None) -> int:
        if self.returncode is not None:
            return self.returncode
        with self._waitpid_lock:
            if self.returncode is None:
                code = self._exit_code(timeout)
                if code is None:
                    raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
                self.returncode = code
        return self.returncode


def _receive(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the zygote closed the connection")
        data += chunk
    return data


def _forkable(args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    if os.environ.get("RECIPES_TEST_FORK", "1") == "0" or _command(args) is None:
        return False
    if any(kwargs.get(key) for key in ("shell", "preexec_fn", "pass_fds", "start_new_session", "process_group")):
        return False
    address = _ZYGOTE.address()
    if address is None:
        return False
    env = kwargs.get("env")
    return _startup_environment(env if env is not None else os.environ) == address[1]


def popen(args: Sequence[Any], **kwargs: Any) -> "subprocess.Popen[Any]":
    """`subprocess.Popen(args, **kwargs)`, forked from the zygote where it can stand in (module docstring)."""
    if _forkable(args, kwargs):
        return ForkedPopen(list(args), **kwargs)
    return subprocess.Popen(list(args), **kwargs)


def run(args: Sequence[Any], *, input: Any = None, timeout: float | None = None, check: bool = False,
        capture_output: bool = False, **kwargs: Any) -> "subprocess.CompletedProcess[Any]":
    """`subprocess.run` through `popen`."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with popen(args, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except BaseException:
            process.kill()
            process.wait()
            raise
    completed = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    if check:
        completed.check_returncode()
    return completed


# ----------------------------------------------------------------------------------------------
# The zygote side


def serve(socket_path: str) -> None:
    """Import `PRELOAD`, then fork a child per request until the process that started this one ends."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    listener.settimeout(0.05)
    Path(socket_path + ".ready").touch()
    children: dict[int, socket.socket] = {}
    while os.getppid() == parent:
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            connection = None
        if connection is not None:
            connection.settimeout(None)
            children[_fork_child(connection, listener, children)] = connection
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            ended = children.pop(pid, None)
            if ended is not None:
                try:
                    ended.sendall(_EXIT.pack(os.waitstatus_to_exitcode(status)))
                except OSError:
                    pass  # the test side went away
                ended.close()


def _fork_child(connection: socket.socket, listener: socket.socket, children: Mapping[int, socket.socket]) -> int:
    header, fds, _, _ = socket.recv_fds(connection, _HEADER.size, 3)
    if len(header) < _HEADER.size:
        header += _receive(connection, _HEADER.size - len(header))
    request = json.loads(_receive(connection, _HEADER.unpack(header)[0]))
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        listener.close()
        for other in children.values():
            other.close()
        connection.close()
        _run_child(request, fds)  # never returns
    for fd in fds:
        os.close(fd)
    connection.sendall(_EXIT.pack(pid))
    return pid


def _run_child(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become the command `python` would have started, run it, exit as it would."""
    code: int = 1
    interrupted = False
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds) - {0, 1, 2}:
            os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for name in ("SIGTERM", "SIGHUP", "SIGCHLD", "SIGUSR1", "SIGUSR2"):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _standard_streams()
        if THREADS_VARIABLE in os.environ:
            import torch

            torch.set_num_threads(int(os.environ[THREADS_VARIABLE]))
        code = _execute(request["argv"])
    except KeyboardInterrupt:
        import traceback

        traceback.print_exc()
        interrupted = True
    finally:
        try:
            threading._shutdown()  # type: ignore[attr-defined]  # as an interpreter's exit waits for its threads
            atexit._run_exitfuncs()
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
        except BaseException:  # noqa: BLE001  the child must end here whatever happens
            pass
        if interrupted:  # as python ends on an uncaught KeyboardInterrupt: by the signal itself
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code)


def _standard_streams() -> None:
    encoding, errors = sys.stdout.encoding, sys.stdout.errors
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(open(0, "rb", closefd=False), encoding=encoding, errors=errors)
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(open(1, "wb", closefd=False), encoding=encoding,
                                                   errors=errors, line_buffering=os.isatty(1))
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(open(2, "wb", closefd=False), encoding=encoding,
                                                   errors="backslashreplace", line_buffering=True)


def _execute(argv: list[str]) -> int:
    """Run `argv` (["-m", module, ...], ["-c", code, ...] or [script, ...]); its exit code."""
    import runpy
    import types

    extra = [os.path.abspath(p) for p in os.environ.get(PATH_VARIABLE, "").split(os.pathsep) if p]
    sys.path[1:1] = [p for p in extra if p not in sys.path]  # after the command's own folder, as python puts them

    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0] = os.getcwd()
            sys.modules.pop(argv[1], None)  # run afresh as __main__, not the copy the zygote imported
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            sys.path[0] = ""
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(argv[1], "<string>", "exec"), main.__dict__)
        else:
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        raise
    except BaseException:  # noqa: BLE001  printed as python prints an uncaught exception
        sys.excepthook(*sys.exc_info())
        return 1
    return 0


if __name__ == "__main__":
    serve(sys.argv[1])
