"""The Kubernetes backend: replicas as processes of per-attempt agent pods, one per node.

The package imports nothing: the factory loads `backend.KubernetesBackend` for
`backend: kubernetes`.
"""
