"""Job state and the event log (sqlite, embedded)."""

from perdure.store.sqlite import Store, StoredEvent

__all__ = ["Store", "StoredEvent"]
