"""What runs on a node, for every backend that runs replicas as processes: the supervisor, the
spawner with its pool of warm standbys, the replicas' logs and records, and the launch
transport. The local backend runs them on this machine; the cluster backends on their nodes,
keeping the controller's copy of what they write there (`mirror`).
"""
