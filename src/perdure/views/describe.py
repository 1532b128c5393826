"""A job as `perdure describe --json` and the API's job page show it: one dict."""

from __future__ import annotations

from typing import Any

from perdure.backends.base import Inspector
from perdure.core.model import Job
from perdure.core.resume import STARTS_OVER
from perdure.store.sqlite import Store
from perdure.views import jobview
from perdure.views.reports import elastic_changes, goodput
from perdure.views.watchreport import watchdog_json


def describe_json(store: Store, job: Job, reader: Inspector) -> dict[str, Any]:
    events = store.events(job.id)
    g = goodput(reader, job, events)
    return {
        "id": job.id,
        "name": job.name,
        "state": job.state.value,
        "queue_reason": jobview.queue_reason(job),
        "queue": job.spec.queue,
        "priority": job.priority,
        "attempt": job.attempt,
        "created": job.created,
        "step": jobview.step(g, job),
        "total_steps": g.total_steps,
        **jobview.errors_json(job),
        "checkpoint": {"failed_saves": job.failed_saves, "alert": job.save_alert,
                       "last_error": job.save_error or None},
        "retries": job.retries,
        # the last relaunch that lost its work without a word from the script (core.resume)
        "starts_over": next((e.message for e in reversed(events) if e.kind == STARTS_OVER),
                            None),
        "replicas": [{**jobview.replica_json(r), "gpus": r.gpus,
                      "devices": list(r.devices) if r.gpus else [],
                      "procs": _procs(job, r.pool)} for r in job.replicas],
        "spares": dict(job.spares),
        "goodput": g.to_json(),
        "elastic": [{"time": c.time, "what": c.what, "cost_seconds": c.cost_s, "cost": c.cost}
                    for c in elastic_changes(reader, job, events)],
        "watchdog": watchdog_json(events),
        "events": [{"time": e.time, "kind": e.kind, "message": e.message} for e in events],
    }


def _procs(job: Job, pool: str) -> int:
    return next(p.procs_per_replica for p in job.spec.pools if p.name == pool)
