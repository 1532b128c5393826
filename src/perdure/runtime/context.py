"""`perdure.init()`: a training script's one call to join its job.

Reads the environment the controller set (torchrun's plus PERDURE_*), brings the process
group up with bounded timeouts and installs the error-file hook and the preemption handler.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from perdure.runtime import exitguard, transport
from perdure.runtime.errors import install_excepthook
from perdure.runtime.ranks import device_index, env_int

# The exit status that tells the controller "state saved, resume me" (EX_TEMPFAIL).
EXIT_SUSPENDED = 75
DEFAULT_COLLECTIVE_TIMEOUT = 120.0


@dataclass
class Context:
    """What a replica knows about itself and its job."""

    rank: int
    world_size: int
    local_rank: int
    job_id: str
    replica: str
    attempt: int
    restart_count: int
    checkpoint_dir: str | None
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def should_stop(self) -> bool:
        """True once a preemption notice (SIGTERM) has arrived: finish the step and save."""
        return self._stop.is_set()

    @property
    def is_primary(self) -> bool:
        return self.rank == 0

    def exit_suspended(self) -> None:
        """Exit with the status that means "saved, resume me" (after the emergency save)."""
        self.finish(EXIT_SUSPENDED)

    def finish(self, code: int = 0) -> None:
        """Leave cleanly: tear the process group down and exit with `code` at once."""
        if "torch" in sys.modules:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                with contextlib.suppress(Exception):  # a broken group must not stop the exit
                    dist.destroy_process_group()
        from perdure.runtime import goodput

        with contextlib.suppress(Exception):  # os._exit skips atexit: deliver progress first
            goodput.drain(2.0)  # bounded: a suspend must end within its grace period
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # not exit(): gloo's teardown at interpreter exit can hang


_context: Context | None = None


def is_notice(t: transport.Transport) -> bool:
    """Whether the SIGTERM just received is a notice to save (all but a plain stop request)."""
    request = t.stop_request()
    return request is None or request.get("notice") is not None


def _install_preemption_handler(ctx: Context) -> None:
    from perdure.runtime import goodput

    carrier = transport.current()  # made now: a signal handler must not take its lock

    def on_notice(signum: int, frame: FrameType | None) -> None:
        if is_notice(carrier):
            ctx._stop.set()
            return
        # A plain stop: nothing to save; die of the signal at once, as without this handler.
        with contextlib.suppress(Exception):  # may have interrupted a write to either
            goodput.reporter().flush(block=False)
            sys.stdout.flush()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_notice)


def _init_process_group(backend: str | None, timeout: float, world_size: int) -> None:
    import torch
    import torch.distributed as dist

    if world_size <= 1 or dist.is_initialized():
        return
    from perdure.runtime import envstore

    envstore.install()  # connect as soon as rank 0 listens, not after torch's backoff
    if torch.cuda.is_available():
        _select_device(torch)
    chosen = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    dist.init_process_group(chosen, timeout=datetime.timedelta(seconds=timeout))


def _select_device(torch: Any) -> None:
    """Make this local rank's share of the replica's GPUs current, unless the script chose."""
    if torch.cuda.is_initialized() and torch.cuda.current_device() != 0:
        return
    index = device_index(env_int("LOCAL_RANK", 0), env_int("LOCAL_WORLD_SIZE", 1),
                         torch.cuda.device_count())
    torch.cuda.set_device(index)


def init(
    *,
    backend: str | None = None,
    seed: int | None = None,
    collective_timeout: float | None = None,
    distributed: bool = True,
) -> Context:
    """Join the job: process group up (gloo on CPU, nccl on GPU), hooks installed.

    `seed` (else $PERDURE_SEED): every RNG is seeded with it on every rank. With neither, the
    generators are left as they are, so init() may run before or after the script's (or a
    Trainer's) own `set_seed` without changing its draws.
    `collective_timeout` (seconds; $PERDURE_COLLECTIVE_TIMEOUT, default 120) bounds how long a
    collective waits for a peer that hangs. Calling init twice returns the same context.
    """
    global _context
    if _context is not None:
        return _context
    install_excepthook()
    exitguard.install()
    ctx = Context(
        rank=env_int("RANK", 0),
        world_size=env_int("WORLD_SIZE", 1),
        local_rank=env_int("LOCAL_RANK", 0),
        job_id=os.environ.get("PERDURE_JOB_ID", "local"),
        replica=os.environ.get("PERDURE_REPLICA", "worker-0"),
        attempt=env_int("PERDURE_ATTEMPT", 1),
        restart_count=env_int("PERDURE_RESTART_COUNT", 0),
        checkpoint_dir=os.environ.get("PERDURE_CHECKPOINT_DIR"),
    )
    _install_preemption_handler(ctx)
    timeout = collective_timeout or float(
        os.environ.get("PERDURE_COLLECTIVE_TIMEOUT", DEFAULT_COLLECTIVE_TIMEOUT)
    )
    if distributed:
        _init_process_group(backend, timeout, ctx.world_size)
    if seed is None and os.environ.get("PERDURE_SEED"):
        seed = env_int("PERDURE_SEED", 0)
    if seed is not None:
        from perdure.runtime.rng import seed_everything

        seed_everything(seed)
    _context = ctx
    return ctx


def current() -> Context | None:
    """The context `init()` made in this process, if any."""
    return _context


__all__ = ["EXIT_SUSPENDED", "Context", "current", "init"]
