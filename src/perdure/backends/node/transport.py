"""Which transport a backend's replicas use to reach the controller: "file" (the state dir's
files) or "net" (the controller's relay, on 127.0.0.1 for the local backend)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from perdure.core.events import Launch

if TYPE_CHECKING:
    from perdure.backends.relay.server import Relay


TRANSPORTS = ("file", "net")


class LaunchTransport:
    """The transport of a backend's launches; the relay is started on first use."""

    def __init__(self, state_dir: Path | str, kind: str = "file", host: str = "127.0.0.1") -> None:
        if kind not in TRANSPORTS:
            raise ValueError(f"transport={kind!r} is unknown: use one of {', '.join(TRANSPORTS)}")
        self.kind = kind
        self.state_dir = Path(state_dir)
        self.host = host  # the address the relay binds and replicas are given
        self.relay: Relay | None = None

    def ensure(self) -> None:
        """Start the relay (net), once the controller holds the state dir's lock (its port)."""
        if self.relay is None and self.kind == "net":
            from perdure.backends.relay.server import Relay

            self.relay = Relay.start(self.state_dir, self.host)

    def env(self, launch: Launch) -> dict[str, str]:
        self.ensure()
        return self.relay.launch_env(launch) if self.relay is not None else dict(launch.env)

    def close(self) -> None:
        if self.relay is not None:
            self.relay.close()
            self.relay = None
