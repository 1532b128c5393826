"""What runs on a node, for every backend that runs replicas as processes: the supervisor, the
spawner with its pool of warm standbys, the replicas' logs and records, and the launch
transport. The local backend runs them on this machine; the Ray, Slurm and Kubernetes backends
run them on their nodes (through their node agents), and keep the controller's copy of what
they write there (`mirror`).

Empty on purpose: the supervisor imports submodules of this package on every replica start.
"""
