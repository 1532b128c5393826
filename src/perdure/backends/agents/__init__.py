"""What the agent-based backends (Slurm, Kubernetes) share: the node agent, its hub, links."""
