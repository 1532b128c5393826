"""Where a perdure group restart's time goes, phase by phase, from what one run left behind.

Used by bench/recovery.py (`--phases`) after a perdure window; also runs on its own over a
kept run directory:

    .venv/bin/python bench/recovery_phases.py /tmp/perdure-bench-recovery-XXXX/perdure

For each SIGKILL it reads, all on one clock (time.time() on one machine):
- the killed launch's exit.json (the supervisor saw the exit), the controller's first
  "restart" decision after it (events table of the store), the survivors' exit.json
  (stopped and exited), the new launches' launch.json `created` (the controller launched them),
  on Ray status.json `actor_created` (their launch actors ran on the nodes), and `started_at`
  (the supervisor handed them to a standby or forked them);
- the replicas' own marks in the timeline (examples/ddp_mlp/train.py --timeline): `script`
  (main() entered), `init` (perdure.init: process group up), `model` (model, DDP and
  settle_ddp_buckets built), `restore` (checkpoint restored); and rank 0's first step.
Each phase is printed as the time from the kill to the slowest replica reaching it (the group
waits for the slowest), with the median over the kills, and the increment over the phase
before.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import sys
from pathlib import Path
from typing import Any

# (name, description) in the order a restart goes through them
PHASES = (
    ("exit_seen", "supervisor saw the SIGKILLed replica exit"),
    ("decided", "controller decided the group restart"),
    ("survivors_exited", "survivors stopped and exited"),
    ("launched", "controller launched the 4 replacements (last)"),
    ("actor", "Ray only: their launch actors ran on the nodes (last)"),
    ("started", "supervisors started them in standbys (last)"),
    ("script", "training script's main() entered (last)"),
    ("init", "perdure.init: process group up (last)"),
    ("model", "model + DDP + settle_ddp_buckets built (last)"),
    ("restore", "checkpoint restored (last)"),
    ("first_step", "first step finished (rank 0)"),
)


def _launches(state: Path) -> list[dict[str, Any]]:
    out = []
    for d in sorted((state / "launches").glob("recovery-*")):
        rec: dict[str, Any] = {"id": d.name}
        for name in ("launch", "status", "exit"):
            try:
                rec[name] = json.loads((d / f"{name}.json").read_text())
            except (OSError, ValueError):
                rec[name] = {}
        out.append(rec)
    return out


def _decisions(state: Path) -> list[float]:
    db = next(state.glob("*.db"), None)
    if db is None:
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT time FROM events WHERE kind = 'decision' AND "
                            "message LIKE 'restart %' ORDER BY time").fetchall()
    return [float(t) for (t,) in rows]


def phases_of(kill: float, until: float, launches: list[dict[str, Any]], decisions: list[float],
              marks: list[dict[str, Any]], steps: list[dict[str, Any]]) -> dict[str, float | None]:
    """Seconds from `kill` to each phase (None: not seen before `until`, the next kill)."""
    def first(times: list[float]) -> float | None:
        inside = [t for t in times if kill <= t < until]
        return min(inside) - kill if inside else None

    def last(times: list[float]) -> float | None:
        inside = [t for t in times if kill <= t < until]
        return max(inside) - kill if inside else None

    exits = [(float(x["exit"]["time"]), x["exit"].get("signal")) for x in launches
             if x["exit"].get("time")]
    fresh = [x for x in launches if kill <= float(x["launch"].get("created", 0)) < until]
    pids = {int(x["status"]["pid"]) for x in fresh if x["status"].get("pid")}
    relaunched = max((float(x["launch"]["created"]) for x in fresh), default=until)
    out: dict[str, float | None] = {
        "exit_seen": first([t for t, sig in exits if sig == 9]),
        "decided": first(decisions),
        # the survivors of this round: exits after the kill, before the last relaunch
        "survivors_exited": last([t for t, sig in exits if sig != 9 and t <= relaunched]),
        "launched": last([float(x["launch"]["created"]) for x in fresh]),
        "actor": last([float(x["status"]["actor_created"]) for x in fresh
                       if x["status"].get("actor_created")]),
        "started": last([float(x["status"]["started_at"]) for x in fresh
                         if x["status"].get("started_at")]),
    }
    for phase in ("script", "init", "model", "restore"):
        out[phase] = last([m["t"] for m in marks if m.get("mark") == phase and m["pid"] in pids])
    out["first_step"] = first([r["t"] for r in steps if r["pid"] in pids])
    return out


def analyse(state: Path, kills: list[float], marks: list[dict[str, Any]],
            steps: list[dict[str, Any]]) -> list[dict[str, float | None]]:
    launches, decisions = _launches(state), _decisions(state)
    bounds = [*kills[1:], float("inf")]
    return [phases_of(k, u, launches, decisions, marks, steps)
            for k, u in zip(kills, bounds, strict=True)]


def report(rows: list[dict[str, float | None]]) -> list[str]:
    """The median time from the kill to each phase, and what each phase adds."""
    lines = [f"{'phase (median over ' + str(len(rows)) + ' kills)':<58} {'from kill':>9} "
             f"{'+phase':>7} {'min':>6} {'max':>6}"]
    before = 0.0
    for name, text in PHASES:
        seen = [r[name] for r in rows if r.get(name) is not None]
        if not seen and name == "actor":
            continue  # a local run has no launch actors
        if not seen:
            lines.append(f"{text:<58} {'-':>9}")
            continue
        med = statistics.median(seen)  # type: ignore[type-var]
        lines.append(f"{text:<58} {med:9.3f} {med - before:+7.3f} {min(seen):6.3f} "
                     f"{max(seen):6.3f}")
        before = med
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: bench/recovery_phases.py RUN_DIR (the perdure window bench/recovery.py "
              "kept, e.g. /tmp/perdure-bench-recovery-XXXX/perdure)", file=sys.stderr)
        return 2
    root = Path(argv[0])
    if not (root / "kills.json").is_file() or not (root / "timeline.jsonl").is_file():
        print(f"{root}: not a kept perdure window of bench/recovery.py (it needs kills.json and "
              "timeline.jsonl there)", file=sys.stderr)
        return 2
    kills = json.loads((root / "kills.json").read_text())
    records = [json.loads(x) for x in (root / "timeline.jsonl").read_text().splitlines() if x]
    marks = [r for r in records if "mark" in r]
    steps = [r for r in records if "step" in r]
    print("\n".join(report(analyse(root / "state", kills, marks, steps))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
