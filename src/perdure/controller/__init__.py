"""The imperative shell around the pure core: tick loop, executor, clock."""
