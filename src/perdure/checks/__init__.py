"""`perdure health-check`: what a node must pass before it gets replicas (node.py), and the
all-reduce checks among a node's GPUs and between nodes (collective.py)."""
