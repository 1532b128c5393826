"""The Slurm backend: replicas run by node agents in per-attempt allocations."""
