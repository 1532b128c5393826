"""What the agent-based backends (Slurm, Kubernetes) share: the node agent each node runs
(`agent.HubAgent`), the controller's hub it reports to, the links that read its reports, and
the allocation they track. Each backend adds only what its platform does.
"""
