"""What the agent-based backends (Slurm, Kubernetes) share: the node agent each node runs
(`agent.HubAgent`), the controller's hub it reports to, the allocation they track, the links
that carry launches to the agents and read their reports (`links`) and the inspector the CLI
reads them through. Each backend adds only what its platform does.
"""
