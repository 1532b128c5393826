"""What runs on a node for every backend that runs replicas as processes: the supervisor, the
spawner and its warm pool, the replicas' logs and records (here or on a cluster's nodes)."""
