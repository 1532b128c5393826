"""A replica's transport of either kind over one state dir, laid out as the controller has it.

`file`: FileTransport on the state dir's paths, as the local backend hands them out.
`net`: NetTransport to a real Relay serving that state dir on 127.0.0.1, as a replica on
another host has it. Both must leave the same files behind (that is the contract).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from perdure.backends.relay.server import Relay
from perdure.runtime.transport import FileTransport, NetTransport, Transport, from_env

JOB = "job-t"
REPLICAS = ("worker-0", "worker-1", "worker-2")
SECRET = "0f" * 32


def launch_id(replica: str = "worker-0", attempt: int = 1, n: int = 0) -> str:
    return f"{JOB}.{attempt}.{replica}.{n}"


def start_relay(state: Path) -> Relay:
    """A relay for the one job JOB (its replicas REPLICAS), with its secret SECRET."""
    return Relay.start(state, "127.0.0.1",
                       secret_of=lambda job: SECRET if job == JOB else "other-" + job,
                       replicas_of=lambda job: REPLICAS if job in (JOB, "job-u") else None)


def net_env(address: str, replica: str = "worker-0", *, secret: str = SECRET, job: str = JOB,
            launch: str | None = None) -> dict[str, str]:
    """A replica's environment under the net transport, the relay at `address`."""
    return {"PERDURE_TRANSPORT": "net", "PERDURE_CONTROL_ADDR": address,
            "PERDURE_JOB_SECRET": secret, "PERDURE_JOB_ID": job, "PERDURE_REPLICA": replica,
            "PERDURE_LAUNCH_ID": launch or launch_id(replica), "PERDURE_RDZV": "1"}


def file_transport(state: Path, replica: str = "worker-0") -> FileTransport:
    launch = state / "launches" / launch_id(replica)
    launch.mkdir(parents=True, exist_ok=True)
    return FileTransport(rdzv_dir=state / "rdzv" / JOB, report_dir=launch,
                         stop_file=str(launch / "stop.json"),
                         error_file=str(launch / "error.json"))


@contextmanager
def transport_of(kind: str, state: Path, replica: str = "worker-0") -> Iterator[Transport]:
    if kind == "file":
        yield file_transport(state, replica)
        return
    relay = start_relay(state)
    try:
        t = from_env(net_env(relay.address, replica))
        assert isinstance(t, NetTransport)
        yield t
        t.client.close()
    finally:
        relay.close()
