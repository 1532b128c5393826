"""The Kubernetes API server as perdure talks to it: plain HTTPS (httpx) with a kubeconfig's
credentials (certificates, token, tokenFile, an `exec` plugin; in a pod, the service
account's), and watches as streamed GETs. The official client would bring a 40 MB generated
package for the eight calls perdure makes.

Side effects: HTTPS requests; a kubeconfig's embedded client key and certificate are written
(0600) into the backend's private directory for the TLS library to read.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

try:
    import httpx
except ImportError:  # the extra is not installed: say which
    raise ImportError("backend: kubernetes needs httpx: pip install 'perdure[kubernetes]'"
                      ) from None

IN_CLUSTER = "/var/run/secrets/kubernetes.io/serviceaccount"
TIMEOUT = 30.0
EXEC_SECONDS = 60.0


class KubeError(RuntimeError):
    """The API server refused or could not be reached: its status and message."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Config:
    server: str
    namespace: str
    tls: ssl.SSLContext
    token: str | None = None


def _context(doc: dict[str, Any], name: str | None, source: str) -> dict[str, Any]:
    name = name or doc.get("current-context")
    for item in doc.get("contexts") or []:
        if item.get("name") == name:
            return dict(item.get("context") or {})
    names = [c.get("name") for c in doc.get("contexts") or []]
    raise KubeError(f"{source}: no context {name!r} (it has {names}); set kubernetes.context")


def _named(doc: dict[str, Any], kind: str, name: str, source: str) -> dict[str, Any]:
    for item in doc.get(f"{kind}s") or []:
        if item.get("name") == name:
            return dict(item.get(kind) or {})
    raise KubeError(f"{source}: the context names {kind} {name!r}, which it does not define")


def _file(value: str | None, data: str | None, base: str, private: str, name: str
          ) -> str | None:
    """A path for a kubeconfig's file-or-data field."""
    if data:
        path = os.path.join(private, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64decode(data))
        return path
    if value:
        return value if os.path.isabs(value) else os.path.join(base, value)
    return None


def _exec_credential(spec: dict[str, Any], source: str) -> dict[str, Any]:
    """Run a kubeconfig's credential plugin; the status it prints."""
    argv = [str(spec.get("command", "")), *map(str, spec.get("args") or [])]
    env = {**os.environ, **{str(e["name"]): str(e["value"]) for e in spec.get("env") or []}}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env,
                              timeout=EXEC_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KubeError(f"{source}: the credential plugin {argv[0]!r} failed: {exc}") from None
    if done.returncode != 0:
        raise KubeError(f"{source}: the credential plugin {argv[0]!r} exited "
                        f"{done.returncode}: {done.stderr.strip()[:300]}")
    return dict(json.loads(done.stdout).get("status") or {})


def load_config(path: str | None, context: str | None, namespace: str | None,
                private: str) -> Config:
    """The server, TLS and credentials of `context` in the kubeconfig at `path` (None:
    $KUBECONFIG, else ~/.kube/config, else the pod's service account)."""
    path = path or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
    default = os.path.expanduser("~/.kube/config")
    if path is None and not os.path.exists(default) and os.path.exists(IN_CLUSTER):
        return _in_cluster(namespace)
    source = os.path.expanduser(path or default)
    try:
        with open(source) as f:
            doc = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise KubeError(f"kubernetes.kubeconfig: cannot read {source}: {exc}") from None
    ctx = _context(doc, context, source)
    cluster = _named(doc, "cluster", str(ctx.get("cluster")), source)
    user = _named(doc, "user", str(ctx.get("user")), source)
    base = os.path.dirname(os.path.abspath(source))
    ca = _file(cluster.get("certificate-authority"), cluster.get("certificate-authority-data"),
               base, private, "ca.crt")
    tls = ssl.create_default_context(cafile=ca)
    if cluster.get("insecure-skip-tls-verify"):
        tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE
    if "exec" in user:
        status = _exec_credential(dict(user["exec"]), source)
        user = {"token": status.get("token"),
                "client-certificate-data": _b64(status.get("clientCertificateData")),
                "client-key-data": _b64(status.get("clientKeyData"))}
    cert = _file(user.get("client-certificate"), user.get("client-certificate-data"), base,
                 private, "client.crt")
    key = _file(user.get("client-key"), user.get("client-key-data"), base, private,
                "client.key")
    if cert:
        tls.load_cert_chain(cert, key)
    token = user.get("token")
    if not token and user.get("tokenFile"):
        with open(user["tokenFile"]) as f:
            token = f.read().strip()
    return Config(str(cluster.get("server", "")).rstrip("/"),
                  namespace or str(ctx.get("namespace") or "default"), tls,
                  str(token) if token else None)


def _b64(text: object) -> str | None:
    return base64.b64encode(str(text).encode()).decode() if text else None


def _in_cluster(namespace: str | None) -> Config:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get(
        "KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise KubeError("kubernetes.kubeconfig: none given, ~/.kube/config is missing and "
                        "this is not a pod (no KUBERNETES_SERVICE_HOST)")
    with open(os.path.join(IN_CLUSTER, "token")) as f:
        token = f.read().strip()
    with open(os.path.join(IN_CLUSTER, "namespace")) as f:
        own = f.read().strip()
    tls = ssl.create_default_context(cafile=os.path.join(IN_CLUSTER, "ca.crt"))
    return Config(f"https://{host}:{port}", namespace or own, tls, token)


class Api:
    """Calls to one API server. Thread-safe."""

    def __init__(self, config: Config) -> None:
        self.config = config
        headers = {"Accept": "application/json"}
        if config.token:
            headers["Authorization"] = f"Bearer {config.token}"
        self.http = httpx.Client(base_url=config.server, verify=config.tls, headers=headers,
                                 timeout=TIMEOUT)

    def ns(self, kind: str, name: str = "") -> str:
        tail = f"/{name}" if name else ""
        return f"/api/v1/namespaces/{self.config.namespace}/{kind}{tail}"

    def call(self, method: str, path: str, body: dict[str, Any] | None = None,
             params: dict[str, str] | None = None, ok: tuple[int, ...] = ()
             ) -> dict[str, Any]:
        """One request; its JSON answer ({} for a status in `ok`); KubeError otherwise."""
        try:
            r = self.http.request(method, path, json=body, params=params)
        except httpx.HTTPError as exc:
            raise KubeError(f"{method} {path}: the API server at {self.config.server} did not "
                            f"answer: {exc}") from None
        if r.status_code in ok:
            return {}
        if r.status_code >= 400:
            try:
                message = r.json().get("message", r.text)
            except ValueError:
                message = r.text
            raise KubeError(f"{method} {path}: {r.status_code} {message}", r.status_code)
        out: dict[str, Any] = r.json()
        return out

    def watch(self, path: str, params: dict[str, str]) -> Iterator[dict[str, Any]]:
        """The events of a watch as they come, until the server or the connection ends it."""
        query = {**params, "watch": "1", "allowWatchBookmarks": "true"}
        timeout = httpx.Timeout(TIMEOUT, read=float(params.get("timeoutSeconds", 60)) + 10)
        with self.http.stream("GET", path, params=query, timeout=timeout) as r:
            if r.status_code >= 400:
                r.read()
                raise KubeError(f"watch {path}: {r.status_code} {r.text[:300]}", r.status_code)
            for line in r.iter_lines():
                if line.strip():
                    yield dict(json.loads(line))

    def close(self) -> None:
        self.http.close()
