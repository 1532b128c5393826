"""Watches of the API server: this state dir's pods and every node, as they change.

A thread per watch lists, then follows the changes from that list's resourceVersion, and
lists again when the watch ends. Events land on one queue as (kind, type, object), with
(kind, "SYNCED", {name: object}) after each list.

Side effects: two threads and their HTTPS connections.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from perdure.backends.kubernetes.api import Api, KubeError

RETRY_SECONDS = 0.5
WATCH_SECONDS = 60  # a watch's timeoutSeconds: it is renewed from the last version after

Event = tuple[str, str, dict[str, Any]]


class Watch:
    def __init__(self, api: Api, selector: str) -> None:
        self.api = api
        self.events: queue.Queue[Event] = queue.Queue()
        self.errors: dict[str, str] = {}  # kind -> why its watch fails now ("": it works)
        self._closed = threading.Event()
        self._paths = {"pods": (api.ns("pods"), {"labelSelector": selector}),
                       "nodes": ("/api/v1/nodes", {})}
        for kind in self._paths:
            threading.Thread(target=self._run, args=(kind,), daemon=True,
                             name=f"k8s-watch-{kind}").start()

    def _run(self, kind: str) -> None:
        path, params = self._paths[kind]
        while not self._closed.is_set():
            try:
                listed = self.api.call("GET", path, params=params)
                version = str(listed["metadata"].get("resourceVersion", ""))
                self.events.put((kind, "SYNCED", {i["metadata"]["name"]: i
                                                  for i in listed.get("items") or []}))
                self.errors[kind] = ""
                while not self._closed.is_set():
                    version = self._follow(kind, path, params, version)
            except (KubeError, OSError, ValueError, KeyError) as exc:
                self.errors[kind] = str(exc)
            except Exception as exc:  # httpx's stream errors too: the watch never dies
                self.errors[kind] = f"{type(exc).__name__}: {exc}"
            self._closed.wait(RETRY_SECONDS)

    def _follow(self, kind: str, path: str, params: dict[str, str], version: str) -> str:
        """One watch from `version`; the last version seen (KubeError: list again)."""
        query = {**params, "resourceVersion": version, "timeoutSeconds": str(WATCH_SECONDS)}
        started = time.monotonic()
        for event in self.api.watch(path, query):
            kind_of = str(event.get("type"))
            obj = dict(event.get("object") or {})
            if kind_of == "ERROR":  # 410 Gone: the version is too old; list again
                raise KubeError(f"watch {kind}: {obj.get('message')}", int(obj.get("code", 0)))
            version = str(obj.get("metadata", {}).get("resourceVersion") or version)
            if kind_of != "BOOKMARK":
                self.events.put((kind, kind_of, obj))
        if time.monotonic() - started < 1:
            self._closed.wait(RETRY_SECONDS)  # closed at once: do not spin
        return version

    def close(self) -> None:
        self._closed.set()
