"""The relay: the network end of the runtime's transport, beside the launch transport
(backends/node/transport.py) that starts it for the controller's backend.

server.py listens and authenticates, ops.py is what it does per request, kv.py the jobs'
rendezvous stores, secrets.py the state dir's and jobs' secrets the handshake proves.
"""
