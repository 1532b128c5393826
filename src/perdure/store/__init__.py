"""Job state and the event log (sqlite, embedded)."""
