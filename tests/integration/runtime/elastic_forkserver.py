"""Start elastic test replicas by fork from one process that has imported torch already.

On 2 cores, `import torch` (~3.5 s of CPU) in every replica dominates these tests: four of
them at once take ~8 s, and a replacement's import steals the CPU its survivors train on. The
server imports torch and the worker once; each launch is a fork, a real process with its own
gloo group, environment, log file and exit status (SIGKILL shows as -9, as with Popen). The
local backend's warm pool does the same for real jobs (`backends/node/warm.py`).

Server side (`python elastic_forkserver.py`): reads one JSON launch per line from stdin
({"env", "args", "log", "status"}), forks, answers the child's pid on stdout, and writes each
child's exit code to its `status` file when it ends. No torch op runs before the fork, so no
thread pool is inherited.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REAP_EVERY = 0.02
PRELOAD = ("torch._dynamo", "torch.nn.parallel", "torch.distributed.checkpoint", "numpy.random",
           "getpass", "hmac", "secrets", "shlex", "statistics", "sysconfig")


class Replica:
    """A forked replica, with the parts of Popen's interface the tests use."""

    def __init__(self, pid: int, status: Path) -> None:
        self.pid = pid
        self.status = status
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self.status.exists():
            text = self.status.read_text().strip()
            if text:
                self.returncode = int(text)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(9)


class ForkServer:
    """The client: one server process per test cluster."""

    def __init__(self, log: Path) -> None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve())],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                env=dict(os.environ, OMP_NUM_THREADS="1"), cwd=str(HERE))

    def launch(self, env: dict[str, str], args: list[str], log: Path, status: Path) -> Replica:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        status.unlink(missing_ok=True)
        line = json.dumps({"env": env, "args": args, "log": str(log), "status": str(status)})
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise RuntimeError(f"the fork server exited {self.proc.wait()}; see its log")
        return Replica(int(answer), status)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


# ---- the server -------------------------------------------------------------------------------


def _child(launch: dict[str, Any]) -> None:
    """In the fork: become the replica, run the worker, never return."""
    code = 1
    try:
        os.setpgid(0, 0)
        fd = os.open(launch["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ.clear()
        os.environ.update(launch["env"])
        sys.argv = [str(HERE / "elastic_worker.py"), *launch["args"]]
        import elastic_worker

        elastic_worker.main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _reap(children: dict[int, str]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        path = children.pop(pid, None)
        if path is not None:
            tmp = f"{path}.tmp"
            with open(tmp, "w") as f:
                f.write(str(os.waitstatus_to_exitcode(status)))
            os.replace(tmp, path)


def serve() -> None:
    sys.path.insert(0, str(HERE))
    import elastic_worker  # noqa: F401  (imports torch: once, before any fork)

    for name in PRELOAD:  # what the worker would import lazily (measured: ~1 s on 2 cores)
        __import__(name)
    children: dict[int, str] = {}
    buffered = b""
    while True:
        ready, _, _ = select.select([0], [], [], REAP_EVERY)
        _reap(children)
        if not ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            break  # the test ended: its replicas were killed by it
        buffered += chunk
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            launch = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _child(launch)
            children[pid] = launch["status"]
            os.write(1, f"{pid}\n".encode())


if __name__ == "__main__":
    serve()
