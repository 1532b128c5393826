"""The Ray backend: replicas as detached actors on the Ray nodes of perdure nodes.

The package imports nothing: ray is imported with `backend.RayBackend`, which the factory
loads only for a cluster file's `backend: ray`; `checks` is pure and never imports it.
"""
