"""The Slurm backend: replicas as job steps of per-attempt allocations, node agents as steps.

The package imports nothing: the factory loads `backend.SlurmBackend` for `backend: slurm`.
"""
