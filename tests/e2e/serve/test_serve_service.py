"""The service around the API: a controller that breaks takes the API down with it."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from perdure.backends.base import NodeInfo
from perdure.backends.fake import FakeBackend
from perdure.controller.loop import Controller
from perdure.controller.newjob import make_job
from perdure.core.clusterspec import ClusterSpec, NodeSpec
from perdure.core.launchenv import LaunchSettings
from perdure.core.spec import parse_job_spec
from perdure.serve.auth import Auth
from perdure.serve.context import ServeContext
from perdure.serve.server import Service, bind
from perdure.store.sqlite import Store


def test_a_broken_controller_stops_the_api(tmp_path: Path,
                                           capfd: pytest.CaptureFixture[str]) -> None:
    cluster = ClusterSpec(backend="fake", nodes=[NodeSpec(name="a", slots=2)])
    store = Store(tmp_path / "perdure.db")
    ctl = Controller(tmp_path, store, FakeBackend([NodeInfo("a", 2)]), cluster,
                     LaunchSettings(str(tmp_path), sys.executable))
    ctl.start()
    tick = ctl.tick

    def broken_tick() -> object:  # a bug of the controller's own (a backend's cannot stop it)
        if ctl.snapshot.jobs:
            raise RuntimeError("controller bug")
        return tick()

    ctl.tick = broken_tick  # type: ignore[method-assign,assignment]
    token = "t" * 40
    service = Service(ServeContext(tmp_path, cluster, Auth(token), tmp_path),
                      bind("127.0.0.1", 0), ctl)
    url = service.url

    def submit_when_up() -> None:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as c:
            while True:
                try:
                    c.get("/api/v1/jobs")
                    break
                except httpx.TransportError:
                    time.sleep(0.02)
            spec = parse_job_spec("name: x\npools: [{name: w, command: [python]}]")
            store2 = Store(tmp_path / "perdure.db")
            store2.submit(make_job(spec, str(tmp_path), cluster, str(tmp_path)))
            store2.close()

    threading.Thread(target=submit_when_up, daemon=True).start()
    began = time.monotonic()
    assert service.run() == 1
    assert time.monotonic() - began < 20
    err = capfd.readouterr().err
    assert "the controller stopped (RuntimeError: controller bug)" in err
    assert "re-attaches" in err
    with pytest.raises(httpx.TransportError):
        httpx.get(url + "api/v1/jobs", timeout=2)
