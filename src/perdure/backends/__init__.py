"""Where replicas run: local processes (default), a fake scriptable backend, Ray."""
