"""What every request handler of `perdure serve` shares: paths, the cluster, stores, caches."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from perdure import statedir
from perdure.backends.base import Inspector
from perdure.backends.factory import make_inspector
from perdure.core.clusterspec import ClusterSpec
from perdure.serve.auth import Auth
from perdure.serve.metrics import Metrics
from perdure.serve.views import GoodputCache
from perdure.store.sqlite import Store


@dataclass
class ServeContext:
    state_dir: Path
    cluster: ClusterSpec
    auth: Auth
    workdir: Path  # where jobs submitted through the API resolve relative paths
    # True once the server is shutting down: live streams end on it (serve/server.py sets it)
    stopping: Callable[[], bool] = field(default=lambda: False)
    reader: Inspector = field(init=False)  # the backend's launch records, logs and reports
    goodput: GoodputCache = field(init=False)
    metrics: Metrics = field(init=False)
    _local: threading.local = field(init=False, default_factory=threading.local)

    def __post_init__(self) -> None:
        self.reader = make_inspector(self.cluster, self.state_dir)
        self.goodput = GoodputCache(self.reader)
        self.metrics = Metrics(self.store, self.goodput)

    def store(self) -> Store:
        """This thread's connection (request threads, the event loop), opened on first use;
        the controller keeps its own, and WAL lets these read while it writes."""
        store: Store | None = getattr(self._local, "store", None)
        if store is None:
            store = self._local.store = Store(self.state_dir / statedir.DB)
        return store
