"""Warm standby replicas: a supervisor-to-be holding an interpreter that has imported torch.

A standby is two processes. The spawner (`zygote`, through `pool`) forks a *standby
supervisor* in a session of its own; it starts a fresh interpreter (`warmstart`) as its child,
with PR_SET_PDEATHSIG, which imports torch and says ready; the standby supervisor then tells
the spawner it is ready and waits. When the spawner hands it a launch directory it becomes
that launch's supervisor (`supervisor.serve`), and instead of fork + exec it has its child,
already warm, run the script (`Standby.start_replica`). Since the supervisor is the replica's
parent as in a cold start, supervision, stop escalation, OOM detection, exit records and
adoption work unchanged.

Only a launch whose argv is `[sys.executable, SCRIPT, ...]` or `[sys.executable, "-m", MODULE,
...]` can start warm, and only when the environment variables read while the interpreter and
torch start (`PYTHON*`, `LD_*`, ...) are those the standby started with; anything else starts
cold, exactly as before. This module imports nothing the supervisor does not already import.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys

from perdure.backends.local import procs

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket

POOL_ENV = "PERDURE_WARM_POOL"
DEFAULT_POOL = 2
# "auto" (the default): at least DEFAULT_POOL, grown to the largest group of launches seen
# arriving together (a job's replicas, all restarted at once by a group restart), up to
# AUTO_MAX; each standby holds an interpreter with torch imported (~300 MB).
AUTO = "auto"
AUTO_MAX = 8
STANDBY_CODE = "__import__('perdure.backends.local.warmstart').backends.local.warmstart.main()"
# Read when the interpreter, its site packages, the C libraries or torch start: a standby is
# only good for a launch that agrees with it on all of these. OMP_NUM_THREADS is the
# exception: the warm child applies it with torch.set_num_threads.
STARTUP_PREFIXES = ("PYTHON", "LD_", "MALLOC_", "TORCH_", "KMP_", "GOMP_", "MKL_", "OMP_")
STARTUP_NAMES = ("HOME",)  # the user site-packages directory hangs off it
APPLIED_AT_START = ("OMP_NUM_THREADS",)


def pool_size(value: int | str | None) -> int | str:
    """The pool size from an argument or `$PERDURE_WARM_POOL` (default "auto"): an int >= 0
    or "auto"; ValueError naming the value otherwise."""
    raw = os.environ.get(POOL_ENV, AUTO) if value is None else value
    if raw == AUTO:
        return AUTO
    try:
        size = int(raw)
    except ValueError:
        size = -1
    if size < 0:
        raise ValueError(
            f"warm pool size {raw!r} (argument or ${POOL_ENV}) must be an integer >= 0 or "
            f"{AUTO!r}; 0 turns warm standby replicas off"
        )
    return size


def target(command: list[str], executable: str = sys.executable) -> tuple[str, str] | None:
    """("script", path) or ("module", name) when `command` can start warm; else None.

    Only this interpreter, with no options: `-c`, `-u`, `-X ...` and other interpreters start
    cold. No side effects.
    """
    if len(command) < 2 or command[0] != executable:
        return None
    if command[1] == "-m":
        module = command[2] if len(command) > 2 else ""
        return ("module", module) if module and not module.startswith("-") else None
    if command[1].startswith("-") or not command[1]:
        return None
    return ("script", command[1])


def target_args(command: list[str]) -> list[str]:
    """The script's or module's own arguments (after `SCRIPT` or `-m MODULE`)."""
    return list(command[3:] if command[1] == "-m" else command[2:])


def standby_env(base: dict[str, str]) -> dict[str, str]:
    """The environment a standby interpreter starts with, given the spawner's."""
    env = {k: v for k, v in base.items() if k not in APPLIED_AT_START}
    env.setdefault("PYTHONUNBUFFERED", "1")  # as supervisor.child_env gives a cold replica
    return env


def env_matches(child: dict[str, str], standby: dict[str, str]) -> bool:
    """Whether a replica with env `child` can run in a standby started with env `standby`."""
    for env in (child, standby):
        for key in env:
            if _read_at_start(key) and child.get(key) != standby.get(key):
                return False
    threads = child.get("OMP_NUM_THREADS")
    return threads is None or (threads.isdigit() and int(threads) > 0)


def _read_at_start(key: str) -> bool:
    if key in APPLIED_AT_START:
        return False
    return key in STARTUP_NAMES or key.startswith(STARTUP_PREFIXES)


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
        command_r, command_w = os.pipe()
        ready_r, ready_w = os.pipe()
        parent = os.getpid()
        procs.load_libc()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                os.setsid()
                os.dup2(command_r, 0)
                os.dup2(ready_w, 3)
                os.set_inheritable(0, True)
                os.set_inheritable(3, True)
                signal.pthread_sigmask(signal.SIG_SETMASK, set())
                for name in ("SIGPIPE", "SIGXFSZ"):
                    signal.signal(getattr(signal, name), signal.SIG_DFL)
                procs.set_parent_death_signal(signal.SIGKILL)
                if os.getppid() == parent:
                    os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        os.close(command_r)
        os.close(ready_w)
        return cls(pid, command_w, ready_r, env)

    @classmethod
    def fork(cls, close: list[int]) -> Standby:
        """Fork the interpreter from this process, which has torch imported (a standby
        supervisor forked from the template): ready at once. `close`: descriptors the replica
        must not hold (the link to the spawner)."""
        from perdure.backends.local import supervisor, warmstart

        command_r, command_w = os.pipe()
        ready_r, ready_w = os.pipe()
        parent = os.getpid()
        procs.load_libc()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 127
            try:
                os.setsid()
                os.dup2(command_r, 0)
                os.dup2(ready_w, warmstart.READY_FD)
                for fd in {command_r, command_w, ready_r, ready_w, *close} - {0, 1, 2, 3}:
                    os.close(fd)
                for sig in (*supervisor.HANDLED_SIGNALS, signal.SIGPIPE, signal.SIGXFSZ):
                    signal.signal(sig, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own
                signal.pthread_sigmask(signal.SIG_SETMASK, set())
                procs.set_parent_death_signal(signal.SIGKILL)
                if os.getppid() == parent:
                    code = warmstart.run_forked()
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                os._exit(code)
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
            "args": target_args(command),
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


def launch_fits(
    command: list[str], cwd: str, child: dict[str, str], standby: dict[str, str]
) -> bool:
    """Whether a launch can run in a standby started with env `standby` (no side effects).

    A script must be a regular file: anything else is left to a cold start to report.
    """
    found = target(command)
    if found is None or not env_matches(child, standby):
        return False
    return found[0] == "module" or os.path.isfile(os.path.join(cwd, found[1]))


def run_standby(link: socket.socket, forked: bool = False) -> int:
    """The standby supervisor: warm a child, say ready, then serve the launch it is given.

    Runs in a child the spawner forked (or, `forked`, the template: then its child is forked
    from it, torch already imported); `link` is its end of a socket pair: it writes b"R" when
    ready and reads one launch directory (end of input: not needed, exit).
    """
    from perdure.backends.local import supervisor

    os.setsid()
    signal.pthread_sigmask(signal.SIG_BLOCK, supervisor.HANDLED_SIGNALS)
    standby = Standby.fork([link.fileno()]) if forked else Standby.start()
    if not standby.wait_ready(link):
        print(f"warm standby {standby.pid}: its interpreter exited before it was ready")
        standby.dismiss()
        return 1
    link.sendall(b"R")
    directory = _read_directory(link, standby)
    link.close()
    if not directory:
        standby.dismiss()
        return 0
    return supervisor.serve(directory, standby)


def _read_directory(link: socket.socket, standby: Standby) -> str:
    """The launch directory the spawner sends; "" at end of input or if the child died."""
    try:
        pidfd = os.pidfd_open(standby.pid)
    except (AttributeError, OSError):
        pidfd = -1
    watched = [link.fileno()] + ([pidfd] if pidfd >= 0 else [])
    received = b""
    try:
        while not received.endswith(b"\n"):
            ready, _, _ = select.select(watched, [], [], 1.0)
            if (pidfd >= 0 and pidfd in ready) or not standby.alive():
                return ""
            if link.fileno() in ready:
                chunk = link.recv(4096)
                if not chunk:
                    return ""
                received += chunk
    finally:
        if pidfd >= 0:
            os.close(pidfd)
    return os.fsdecode(received.strip())
