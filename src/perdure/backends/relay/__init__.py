"""The relay: the network end of the runtime's transport (started by backends/node/transport)."""
