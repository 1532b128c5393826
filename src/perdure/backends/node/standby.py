"""A warm standby: an interpreter with torch imported, held by its supervisor-to-be.

What the supervisor and the pool share: which launches can run in one (`launch_fits`), and the
`Standby` handle.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
from collections.abc import Callable

from perdure.backends.node import procs
from perdure.integrations.autoinstall import without_boot

STANDBY_CODE = "__import__('perdure.backends.node.warmstart').backends.node.warmstart.main()"
# Read when the interpreter, the C libraries or torch start: a standby is only good for a
# launch that agrees with it on these (OMP_NUM_THREADS is applied with torch.set_num_threads).
STARTUP_PREFIXES = ("PYTHON", "LD_", "MALLOC_", "TORCH_", "KMP_", "GOMP_", "MKL_", "OMP_")
STARTUP_NAMES = ("HOME",)  # the user site-packages directory hangs off it
APPLIED_AT_START = ("OMP_NUM_THREADS",)


def target(command: list[str]) -> tuple[str, str] | None:
    """("script", path) or ("module", name) when `command` can start warm (this interpreter,
    no options), else None."""
    if len(command) < 2 or command[0] != sys.executable:
        return None
    if command[1] == "-m":
        module = command[2] if len(command) > 2 else ""
        return ("module", module) if module and not module.startswith("-") else None
    if command[1].startswith("-") or not command[1]:
        return None
    return ("script", command[1])


def launch_fits(
    command: list[str], cwd: str, child: dict[str, str], standby: dict[str, str]
) -> bool:
    """Whether a launch can run in a standby started with env `standby` (a script must be a
    regular file: anything else is left to a cold start to report)."""
    found = target(command)
    if found is None or not env_matches(child, standby):
        return False
    return found[0] == "module" or os.path.isfile(os.path.join(cwd, found[1]))


def standby_env(base: dict[str, str]) -> dict[str, str]:
    """The environment a standby interpreter starts with, given the spawner's."""
    env = {k: v for k, v in base.items() if k not in APPLIED_AT_START}
    env.setdefault("PYTHONUNBUFFERED", "1")  # as localranks.child_env gives a cold replica
    return env


def env_matches(child: dict[str, str], standby: dict[str, str]) -> bool:
    """Whether a replica with env `child` can run in a standby started with env `standby`
    (perdure's start-up hook on PYTHONPATH aside: a warm start runs it itself)."""
    child = {**child, "PYTHONPATH": without_boot(child.get("PYTHONPATH", ""))}
    if not child["PYTHONPATH"]:
        del child["PYTHONPATH"]
    for key in {*child, *standby} - set(APPLIED_AT_START):
        read_at_start = key in STARTUP_NAMES or key.startswith(STARTUP_PREFIXES)
        if read_at_start and child.get(key) != standby.get(key):
            return False
    threads = child.get("OMP_NUM_THREADS")
    return threads is None or (threads.isdigit() and int(threads) > 0)


class Standby:
    """A warm interpreter this process started as its child, waiting for its launch."""

    def __init__(self, pid: int, command_fd: int, ready_fd: int, env: dict[str, str]) -> None:
        self.pid = pid
        self.command_fd = command_fd
        self.ready_fd = ready_fd
        self.env = env

    @classmethod
    def start(cls) -> Standby:
        """Start the interpreter in a session of its own; it dies with this process."""
        env = standby_env(dict(os.environ))
        argv = [sys.executable, "-c", STANDBY_CODE]
        return cls._fork(lambda: os.execve(argv[0], argv, env), [])

    @classmethod
    def fork(cls, close: list[int]) -> Standby:
        """Fork the interpreter from this process, which has torch imported."""
        from perdure.backends.node import warmstart

        return cls._fork(warmstart.run_forked, close)

    @classmethod
    def _fork(cls, body: Callable[[], int], close: list[int]) -> Standby:
        """Run `body` in a child that dies with this process, stdin and fd 3 pipes from us."""
        command_r, command_w = os.pipe()
        ready_r, ready_w = os.pipe()
        parent = os.getpid()
        procs.load_libc()

        def child() -> int:
            os.setsid()
            os.dup2(command_r, 0)
            os.dup2(ready_w, 3)
            os.set_inheritable(0, True)  # dup2 onto itself leaves close-on-exec set
            os.set_inheritable(3, True)
            for fd in {command_r, command_w, ready_r, ready_w, *close} - {0, 1, 2, 3}:
                os.close(fd)
            for sig in (*procs.SUPERVISOR_SIGNALS, signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            procs.set_parent_death_signal(signal.SIGKILL)
            return body() if os.getppid() == parent else 127

        pid = procs.fork_child(child)
        os.close(command_r)
        os.close(ready_w)
        return cls(pid, command_w, ready_r, standby_env(dict(os.environ)))

    def wait_ready(self, dismissed: socket.socket) -> bool:
        """Block until the interpreter is ready (True), or it died or `dismissed` closed."""
        ready, _, _ = select.select([self.ready_fd, dismissed.fileno()], [], [])
        if dismissed.fileno() in ready:
            return False  # the spawner only speaks to a standby that said ready: EOF
        return os.read(self.ready_fd, 1) == b"R"

    def alive(self) -> bool:
        """Whether the interpreter still runs (it is not reaped here)."""
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        return os.waitid(os.P_PID, self.pid, flags) is None

    def start_replica(self, command: list[str], env: dict[str, str], spec: dict[str, str]) -> None:
        """Hand the interpreter its launch; OSError if it is gone (then start cold)."""
        found = target(command)
        if found is None or not self.alive():
            raise OSError(f"the standby interpreter (pid {self.pid}) cannot run {command[:3]}")
        message = {
            "target": list(found),
            "args": command[3:] if command[1] == "-m" else command[2:],
            "env": env,
            "cwd": spec["cwd"],
            "stdout": spec["stdout"],
            "stderr": spec["stderr"],
        }
        data = json.dumps(message).encode()
        try:
            while data:
                data = data[os.write(self.command_fd, data) :]
        finally:
            self._close_pipes()

    def _close_pipes(self) -> None:
        for fd in (self.command_fd, self.ready_fd):
            if fd >= 0:
                os.close(fd)
        self.command_fd = self.ready_fd = -1  # never close a number that was reused since

    def dismiss(self) -> None:
        """Kill the interpreter and reap it."""
        self._close_pipes()
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            return

