"""What the API shows beyond `describe`: jobs pages, nodes, timelines, log paths."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perdure import statedir
from perdure.backends.base import Inspector
from perdure.core.clusterspec import ClusterSpec
from perdure.core.events import QUEUED_IN_BACKEND
from perdure.core.model import Job
from perdure.core.records import Node
from perdure.core.states import JobState, ReplicaState
from perdure.store.schema import StoredEvent, UnreadableJob
from perdure.store.sqlite import Store
from perdure.views import jobview
from perdure.views.reports import STATE_KINDS, accounted_launches, first_match, goodput

LIVE_GOODPUT_SECONDS = 1.0  # short: the list and the job's page agree on the step
MAX_MARKS = 2000  # timeline marks per job; more are counted, not drawn


LOG_SUFFIXES = {"all": "log", "stderr": "err", "stdout": "out"}


def log_file(state_dir: Path, job: Job, replica: str, attempt: int, stream: str) -> Path:
    """The file `perdure logs` reads for a replica's attempt and stream (for 'all', an
    attempt run before logs were merged has only its stderr)."""
    base = Path(statedir.log_dir(state_dir, job.id, attempt))
    path = base / f"{replica}.{LOG_SUFFIXES[stream]}"
    if stream == "all" and not path.exists() and (base / f"{replica}.err").exists():
        return base / f"{replica}.err"
    return path


@dataclass
class GoodputCache:
    """Goodput per job for the jobs list: an ended job's never changes; a live one's is
    reused for LIVE_GOODPUT_SECONDS."""

    reader: Inspector
    entries: dict[str, tuple[float, float, dict[str, Any]]] = field(default_factory=dict)

    def get(self, store: Store, job_id: str, updated: float, terminal: bool) -> dict[str, Any]:
        now = time.monotonic()
        hit = self.entries.get(job_id)
        if hit is not None and hit[0] == updated and (terminal or
                                                      now - hit[1] < LIVE_GOODPUT_SECONDS):
            return hit[2]
        try:
            job = store.job(job_id)
        except UnreadableJob:  # the controller fails it; the pages around it still answer
            return {}
        if job is None:
            return {}
        value = jobview.progress_json(goodput(self.reader, job, store.events(job_id)), job)
        self.entries[job_id] = (updated, now, value)
        return value


def job_page(store: Store, cache: GoodputCache, states: list[str], search: str | None,
             limit: int, offset: int) -> dict[str, Any]:
    where, args = ["1=1"], []
    if states:
        where.append(f"state IN ({','.join('?' * len(states))})")
        args.extend(states)
    if search:
        # instr, not LIKE: every character is literal (LIKE's pattern would end at a NUL)
        where.append("(instr(lower(name), lower(?)) > 0 OR instr(lower(id), lower(?)) > 0)")
        args.extend([search, search])
    cond = " AND ".join(where)
    total = store.db.execute(f"SELECT count(*) FROM jobs WHERE {cond}", args).fetchone()[0]
    rows = store.db.execute(
        "SELECT id, name, queue, priority, state, attempt, created, updated, data FROM jobs"
        f" WHERE {cond} ORDER BY created DESC, id LIMIT ? OFFSET ?", [*args, limit, offset],
    ).fetchall()
    counts = dict(store.db.execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall())
    jobs = []
    for jid, name, queue, prio, state, attempt, created, updated, data in rows:
        d = store.job_doc(jid, data)
        reps = d.get("replicas", [])
        progress = (cache.get(store, jid, updated, JobState(state).terminal) if attempt > 0
                    else {})  # never launched: nothing to account
        jobs.append({
            "id": jid, "name": name, "queue": queue, "priority": prio, "state": state,
            "queue_reason": (d.get("backend_queue") or None) if state == "QUEUED" else None,
            "attempt": attempt, "created": created, "updated": updated,
            "replicas": len(reps),
            "replicas_running": sum(r.get("state") == "RUNNING" for r in reps),
            "step": progress.get("step", d.get("step")),
            "total_steps": progress.get("total_steps"),
            **jobview.stored_errors(JobState(state), d.get("error")),
            "goodput": progress.get("goodput"),
            "goodput_status": progress.get("goodput_status", "not started"),
        })
    return {"total": total, "offset": offset, "limit": limit, "counts": counts, "jobs": jobs}


def held(store: Store) -> tuple[Counter[str], Counter[str]]:
    """Slots and GPUs held on each node, from the stored replicas (no job spec parsed)."""
    holding = [s.value for s in JobState if s.holds_capacity]
    rows = store.db.execute(
        f"SELECT id, data FROM jobs WHERE state IN ({','.join('?' * len(holding))})", holding
    ).fetchall()
    slots: Counter[str] = Counter()
    gpus: Counter[str] = Counter()
    for job_id, data in rows:
        for r in store.job_doc(job_id, data).get("replicas", []):
            if r.get("node") and ReplicaState(r["state"]).alive:
                slots[r["node"]] += int(r.get("slots", 1))
                gpus[r["node"]] += len(r.get("devices") or ())
    return slots, gpus


def nodes(store: Store, cluster: ClusterSpec) -> list[dict[str, Any]]:
    stored = store.nodes()  # what the controller found at start; before that, the file's
    known = list(stored.values()) or [Node(n.name, n.slots, gpus=n.gpus or 0)
                                      for n in cluster.nodes]
    used, gpus = held(store)
    return [{"name": n.name, "state": n.shown, "reason": n.fence, "slots": n.slots,
             "used": used[n.name], "free": max(0, n.slots - used[n.name]) if n.schedulable else 0,
             "gpus": n.gpus, "gpus_used": gpus[n.name]} for n in known]


# (event kind, message prefix) -> timeline mark; the first match wins
MARKS: tuple[tuple[str, str, str], ...] = (
    ("launch", "", "launch"),
    ("state", "PENDING: attempt", "launch"),
    ("decision", "succeed", "exit"),
    ("decision", "done", "exit"),
    ("decision", "restart", "restart"),
    ("decision", "retry job", "retry"),
    ("decision", "hot-swap", "hot-swap"),
    ("decision", "move ", "move"),
    ("decision", "suspend job", "suspend"),
    ("decision", "fail job", "failure"),
    ("state", "SUSPENDING", "suspend"),
    ("elastic", "", "elastic"),
    ("exit", "", "exit"),
    ("launch-failed", "", "failure"),
)
ATTEMPT_ENDS = ("QUEUED", "SUSPENDED", "SUCCEEDED", "FAILED", "CANCELLED")


def timeline(reader: Inspector, job: Job, events: list[StoredEvent]) -> dict[str, Any]:
    """The job's states over time, its attempts, and marks (events, and the accounted
    replica's checkpoints and restores)."""
    states = [{"time": e.time, "state": e.message.split(":", 1)[0]}
              for e in events if e.kind in STATE_KINDS]
    attempts: list[dict[str, Any]] = []
    marks: list[dict[str, Any]] = []
    for e in events:
        if e.kind == "state" and e.message.startswith("PENDING: attempt "):
            if attempts and attempts[-1]["end"] is None:
                attempts[-1]["end"] = e.time
            attempts.append({"attempt": len(attempts) + 1, "start": e.time, "end": None})
        elif (e.kind == "state" and attempts and e.message.startswith(ATTEMPT_ENDS)
              and not e.message.startswith(QUEUED_IN_BACKEND)):
            attempts[-1]["end"] = attempts[-1]["end"] or e.time
        kind = first_match(MARKS, e)
        if kind is not None:
            marks.append({"time": e.time, "kind": kind, "label": e.message})
    for launch in accounted_launches(reader, job):
        for rec in launch.records:
            if rec.get("kind") in ("checkpoint_save", "restore") and "t" in rec:
                what = "checkpoint" if rec["kind"] == "checkpoint_save" else "restore"
                marks.append({"time": float(rec["t"]), "kind": what,
                              "label": f"{what} step {rec.get('step')} "
                                       f"({float(rec.get('seconds', 0)):.2f}s)"})
    marks.sort(key=lambda m: m["time"])
    now = time.time()
    end = states[-1]["time"] if job.state.terminal and states else now
    return {"start": job.created, "end": end, "now": now, "states": states,
            "attempts": attempts, "marks": marks[-MAX_MARKS:],
            "marks_left_out": max(0, len(marks) - MAX_MARKS)}
