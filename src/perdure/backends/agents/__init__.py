"""What the agent-based backends (Slurm, Kubernetes) share: the node agent each node runs
(`agent.HubAgent`), the controller's hub it reports to, the links that read its reports, the
allocation they track, their launches from the call to the agent (`launches`) and the
inspector the CLI reads them through. Each backend adds only what its platform does.
"""
