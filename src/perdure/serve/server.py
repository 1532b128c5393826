"""Run the HTTP API and the controller (on a thread of its own) in one process.

A signal stops both, the replicas running on for the next controller. A controller that
raises stops the API too: a dashboard must never show a dead controller's jobs as moving.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable

import uvicorn

from perdure.controller.loop import Controller
from perdure.serve.app import create_app
from perdure.serve.context import ServeContext

GRACEFUL_SHUTDOWN_SECONDS = 1  # open event and log streams are cut after this


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: the OS picks one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and
    # without it every keep-alive response waits for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class Service:
    def __init__(self, ctx: ServeContext, sock: socket.socket, controller: Controller | None,
                 until: Callable[[], bool] | None = None) -> None:
        self.ctx, self.sock, self.controller = ctx, sock, controller
        self.until = until  # stop once this is true (benchmarks); checked after each tick
        self.stopping = threading.Event()
        self.failure: BaseException | None = None
        self.tick_seconds: deque[float] = deque(maxlen=200_000)  # recent ticks, for benches
        config = uvicorn.Config(
            create_app(ctx), log_level="warning", access_log=False, server_header=False,
            proxy_headers=False, lifespan="off",
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS)
        self.server = uvicorn.Server(config)
        # uvicorn's own signal handlers set should_exit: open streams end on it, before the
        # graceful shutdown's deadline would cancel them (a traceback per stream)
        ctx.stopping = lambda: self.server.should_exit or self.stopping.is_set()
        if controller is not None:
            controller.on_exit = ctx.metrics.detection.observe

    @property
    def url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"

    def run(self) -> int:
        """Serve until a signal (or `until`); 1 if the controller broke, else 0."""
        previous = {s: signal.signal(s, lambda *_: self.stop())
                    for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            if self.controller is None:
                self.server.run(sockets=[self.sock])
            else:
                worker = threading.Thread(target=self._drive, name="perdure-controller")
                worker.start()
                self.server.run(sockets=[self.sock])
                self.stopping.set()
                worker.join()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            if self.controller is not None:
                self.controller.close()
        return 1 if self.failure is not None else 0

    def stop(self) -> None:
        self.stopping.set()
        self.server.should_exit = True

    def _after_tick(self) -> bool:
        ctl = self.controller
        assert ctl is not None
        for seconds in ctl.tick_seconds:
            self.ctx.metrics.tick.observe(seconds)
            self.tick_seconds.append(seconds)
        ctl.tick_seconds.clear()  # a server runs for weeks: the list must not grow
        if self.until is not None and self.until():
            self.stop()
        return self.stopping.is_set()

    def _drive(self) -> None:
        ctl = self.controller
        assert ctl is not None
        try:
            while not self.server.started and not self.stopping.is_set():
                time.sleep(0.01)  # tick once the API is up, so both start together
            if not self.stopping.is_set():
                ctl.run(until=self._after_tick)
        except BaseException as exc:
            self.failure = exc
            traceback.print_exc()
            print(f"perdure serve: the controller stopped ({type(exc).__name__}: {exc}); "
                  "stopping the API too. Start `perdure serve` again: it re-attaches to the "
                  "running replicas.", file=sys.stderr, flush=True)
        finally:
            self.stop()
