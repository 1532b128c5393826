"""`/metrics`: Prometheus text format; gauges read from the store at scrape time.

The tick and detection histograms are fed by this process's controller. Per-job series cover
unfinished jobs and those that ended within RECENT_SECONDS (final values, bounded labels).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from perdure.core.records import QUARANTINED
from perdure.core.states import JobState, NodeState, ReplicaState
from perdure.serve.views import GoodputCache
from perdure.store.schema import TERMINAL, UnreadableJob
from perdure.store.sqlite import Store

RECENT_SECONDS = 3600.0
TICK_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
DETECTION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class StoreCollector(Collector):
    def __init__(self, store: Callable[[], Store], cache: GoodputCache) -> None:
        self.store, self.cache = store, cache

    def collect(self) -> Iterator[Metric]:
        store = self.store()
        db = store.db
        jobs = GaugeMetricFamily("perdure_jobs", "Jobs in each state.", labels=["state"])
        counts = dict(db.execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall())
        for s in JobState:
            jobs.add_metric([s.value], counts.get(s.value, 0))
        yield jobs
        recent = db.execute(
            "SELECT id, state, updated, data FROM jobs WHERE state NOT IN"
            f" {TERMINAL} OR updated > ?", (time.time() - RECENT_SECONDS,)).fetchall()
        yield from self._per_job(store, recent)
        nodes = GaugeMetricFamily("perdure_nodes", "Nodes in each state.", labels=["state"])
        stored = [n.shown for n in store.nodes().values()]
        for shown in (*(ns.value for ns in NodeState), QUARANTINED):
            nodes.add_metric([shown], stored.count(shown))
        yield nodes

    def _per_job(self, store: Store, rows: list[tuple[str, str, float, str]]
                 ) -> Iterator[Metric]:
        replicas = GaugeMetricFamily("perdure_replicas", "Replicas of unfinished jobs in each "
                                     "state.", labels=["state"])
        retries = CounterMetricFamily("perdure_job_retries", "Job retries (new attempts) spent.",
                                      labels=["job"])
        ratio = GaugeMetricFamily("perdure_job_goodput_ratio", "Productive time over running "
                                  "time.", labels=["job"])
        failed_saves = GaugeMetricFamily(
            "perdure_checkpoint_failed_saves", "Checkpoint saves that failed in a row (training "
            "goes on without new checkpoints); 0 once a save commits.", labels=["job"])
        by_state = dict.fromkeys((s.value for s in ReplicaState), 0)
        for row in rows:
            try:
                states, spent, value, failed = self._job(store, row)
            except (UnreadableJob, ValueError, TypeError, KeyError, AttributeError):
                # an unreadable job's series are left out (the controller fails it)
                continue
            for name in states:
                by_state[name] = by_state.get(name, 0) + 1
            retries.add_metric([row[0]], spent)
            failed_saves.add_metric([row[0]], failed)
            if value is not None:
                ratio.add_metric([row[0]], value)
        for s, n in by_state.items():
            replicas.add_metric([s], n)
        yield replicas
        yield self._restarts(store, [r[0] for r in rows])
        yield retries
        yield ratio
        yield failed_saves

    def _job(self, store: Store, row: tuple[str, str, float, str]
             ) -> tuple[list[str], int, float | None, int]:
        """Replica states (unfinished jobs), retries, goodput, saves failed in a row."""
        job_id, state, updated, data = row
        terminal = JobState(state).terminal
        d = json.loads(data) if terminal else store.job_doc(job_id, data)
        states = [] if terminal else [str(r["state"]) for r in d.get("replicas", [])]
        spent = sum(int(n) for n in d.get("retries", {}).values())
        goodput = self.cache.get(store, job_id, updated, terminal).get("goodput")
        return states, spent, goodput, int(d.get("failed_saves", 0))

    @staticmethod
    def _restarts(store: Store, job_ids: list[str]) -> Metric:
        restarts = CounterMetricFamily("perdure_replica_restarts", "Replica restarts decided "
                                       "by the controller.", labels=["job"])
        for job_id in job_ids:
            (n,) = store.db.execute(
                "SELECT count(*) FROM events WHERE job_id=? AND kind='decision'"
                " AND message LIKE 'restart %'", (job_id,)).fetchone()
            restarts.add_metric([job_id], n)
        return restarts


class Metrics:
    def __init__(self, store: Callable[[], Store], cache: GoodputCache) -> None:
        self.registry = CollectorRegistry()
        self.tick = Histogram("perdure_controller_tick_seconds", "Duration of controller ticks.",
                              buckets=TICK_BUCKETS, registry=self.registry)
        self.detection = Histogram(
            "perdure_failure_detection_seconds",
            "From a replica's exit to the controller observing it.",
            buckets=DETECTION_BUCKETS, registry=self.registry)
        self.registry.register(StoreCollector(store, cache))

    def render(self) -> bytes:
        return generate_latest(self.registry)
