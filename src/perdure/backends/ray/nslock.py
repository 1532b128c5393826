"""The namespace lock: one controller at a time drives a Ray namespace.

A detached named actor on the head node (a driver-owned one may be cancelled when the GCS
cannot call the driver back, behind a NAT); it leaves once its controller's Ray job ended.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Any

import ray
from ray.exceptions import RayActorError, RayError

from perdure.backends.base import BackendBusy, BackendUnavailable
from perdure.backends.ray.cluster import gcs_client
from perdure.backends.ray.nodeactor import PIN, remote_class
from perdure.core.clusterspec import RaySpec

LOCK_NAME = "controller-lock"
HEAD_RESOURCE = "node:__internal_head__"  # what Ray's head node advertises (and only it)
LOCK_WAIT_SECONDS = 30.0  # a killed controller's lock leaves once its job ends, within seconds
WATCH_SECONDS = 0.5  # how often the lock asks the GCS whether its controller's job ended


class NamespaceLock:
    """Held (alive) by one controller until its Ray job ends; its token tells the spare launch
    actors whose it is."""

    def __init__(self, job_id: str, pid: int) -> None:
        self.token = uuid.uuid4().hex
        self.pid = pid
        self.job_id = job_id
        threading.Thread(target=self._watch, daemon=True,
                         name="perdure-lock-watch").start()

    def holder(self) -> dict[str, Any]:
        return {"pid": self.pid, "token": self.token, "job": self.job_id}

    def _watch(self) -> None:
        while not job_ended(self.job_id):
            time.sleep(WATCH_SECONDS)
        os._exit(0)  # a detached actor ends only so (or killed); its name is free again


def job_ended(job_id: str) -> bool:
    """Whether the GCS says the Ray job `job_id` (hex) has ended (no answer: False)."""
    try:
        jobs = gcs_client().get_all_job_info(job_or_submission_id=job_id,
                                             skip_submission_job_info_field=True,
                                             skip_is_running_tasks_field=True, timeout=5)
    except Exception:
        return False
    info = next((v for k, v in jobs.items() if k.hex() == job_id), None)
    return info is None or bool(info.is_dead)


def take_lock(spec: RaySpec, owner: str) -> tuple[Any, str]:
    """The namespace's lock and its token; BackendBusy when another live controller has it."""
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    job_id = ray.get_runtime_context().get_job_id()
    while True:
        try:
            # On the head node: a worker host's death must not free it under a live owner.
            lock = remote_class(NamespaceLock).options(
                name=LOCK_NAME, namespace=spec.namespace, lifetime="detached", num_cpus=0,
                max_restarts=0, resources={HEAD_RESOURCE: PIN}).remote(job_id, os.getpid())
            held = ray.get(lock.holder.remote(), timeout=30)
            return lock, str(held["token"])
        except RayActorError:  # it died starting (its worker was killed): take it again
            if time.monotonic() >= deadline:
                raise BackendUnavailable(
                    f"ray: the controller lock of namespace {spec.namespace!r} at "
                    f"{spec.address} died each time it started; see the head's Ray logs"
                ) from None
            time.sleep(0.5)
        except ValueError:  # the name is taken: another controller, or a dead one's lock
            holder = _live_holder(spec.namespace)
            if holder is not None or time.monotonic() >= deadline:
                raise BackendBusy(
                    f"another controller (pid {holder.get('pid') if holder else '?'} on its "
                    f"machine) drives Ray namespace {spec.namespace!r} at {spec.address}; stop "
                    f"it, or give this one ({owner}) another `ray: namespace`") from None
            time.sleep(0.5)


def _live_holder(namespace: str) -> dict[str, Any] | None:
    """What the lock's holder says, if its controller's job goes on."""
    try:
        lock = ray.get_actor(LOCK_NAME, namespace=namespace)
        holder: Any = ray.get(lock.holder.remote(), timeout=3)
    except (ValueError, RayError):
        return None
    return None if job_ended(str(holder["job"])) else {"pid": holder["pid"]}
