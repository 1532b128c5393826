"""Run the policies and say what they got: a table or JSON.

No side effects but the simulation's own work; the CLI prints what these return.
"""

from __future__ import annotations

import time
from typing import Any

from perdure.core.clusterspec import ClusterSpec
from perdure.core.goodput import CATEGORIES
from perdure.core.spec import JobSpec
from perdure.sim import failures as failure_files
from perdure.sim.calibration import Calibration
from perdure.sim.engine import Engine, Result
from perdure.sim.failures import FailureFile
from perdure.sim.policies import Policy

HOURS = 3600.0


def gpus_of(spec: JobSpec) -> int:
    """GPUs the job uses: the spec's `gpus` per replica where it has them, else its slots."""
    return sum(p.replicas * (p.gpus or p.slots) for p in spec.pools)


def to_json(results: list[Result], meta: dict[str, Any]) -> dict[str, Any]:
    return {**meta, "policies": [{
        "policy": r.policy.name, "about": r.policy.about, "ettr": r.ettr,
        "goodput": r.goodput.goodput, "interruptions": r.counts.interruptions,
        "node_losses": r.counts.node_losses, "restarts": r.counts.restarts,
        "nodes_quarantined": r.counts.fenced, "repeat_offender_interruptions":
            r.counts.lemon_hits,
        "job_retries": r.counts.retries, "manual_interventions": r.counts.manual,
        "restores": r.counts.restores,
        "badput_hours": {k: v / HOURS for k, v in r.goodput.badput.items()},
        "productive_hours": r.goodput.productive / HOURS, "wall_hours": r.goodput.wall / HOURS,
    } for r in results]}


def table(results: list[Result], meta: dict[str, Any]) -> str:
    cats = [c for c in (*CATEGORIES, "manual")
            if any(r.goodput.badput.get(c, 0.0) > 0 for r in results)]
    head = (f"{'policy':<22} {'ETTR':>6} {'interr.':>7} {'restarts':>8} {'retries':>7} "
            f"{'manual':>6} {'fenced':>6}  " + " ".join(f"{c[:12]:>12}" for c in cats))
    lines = [f"{meta['spec']} on {meta['nodes']} nodes ({meta['gpus']} GPUs), "
             f"{meta['days']:g} days, failures {meta['failures']}, calibration "
             f"{meta['calibration']}, seed {meta['seed']}",
             "badput in hours (the categories of `perdure describe`)", "", head]
    for r in results:
        bad = " ".join(f"{r.goodput.badput.get(c, 0.0) / HOURS:12.2f}" for c in cats)
        lines.append(f"{r.policy.name:<22} {r.ettr:6.1%} {r.counts.interruptions:7d} "
                     f"{r.counts.restarts:8d} {r.counts.retries:7d} {r.counts.manual:6d} "
                     f"{r.counts.fenced:6d}  {bad}")
    lines += ["", *(f"{r.policy.name}: {r.policy.about}" for r in results),
              f"(simulated in {meta['seconds']:.1f} s)"]
    return "\n".join(lines)


def run(spec: JobSpec, spec_name: str, cluster: ClusterSpec, failures: FailureFile,
        failures_name: str, calib: Calibration, calib_name: str, policies: list[Policy],
        days: float, seed: int) -> tuple[list[Result], dict[str, Any]]:
    """Every policy against the same failure draw (same seed: the same faults, in order)."""
    gpus, seconds = gpus_of(spec), days * 86400
    failure_files.check_expected(failures, gpus, seconds, failures_name)
    began = time.perf_counter()
    nodes = {n.name: (n.slots, n.gpus or 0) for n in cluster.nodes}
    draws = failure_files.Draws(failures, gpus, len(nodes), seconds, seed)
    lemons = frozenset(failure_files.lemon_nodes(failures, list(nodes), seed))
    kinds = frozenset(failures.repeat_offenders.kinds if failures.repeat_offenders else ())
    results = [Engine(spec, nodes, draws, calib, p, seconds, failures.switch_nodes, lemons,
                      kinds).run()
               for p in policies]
    meta = {"spec": spec_name, "nodes": len(cluster.nodes), "gpus": gpus, "days": days,
            "failures": failures_name, "calibration": calib_name, "seed": seed,
            "seconds": time.perf_counter() - began}
    return results, meta
