"""The Kubernetes backend: replicas as processes of per-attempt agent pods, one per node."""
