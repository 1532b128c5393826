"""`perdure serve`: the HTTP API, the web dashboard and Prometheus metrics of a state dir.

Needs the `serve` extra (FastAPI, uvicorn, prometheus-client); nothing else imports it.
"""
