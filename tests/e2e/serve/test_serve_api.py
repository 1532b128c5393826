"""The HTTP API through a real `perdure serve` process, as a script or a browser drives it."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from serve_harness import PERDURE, Server, spec, start_server, stop_server

QUICK = "print('hello from the api')"


def test_every_route_needs_the_token(server: Server) -> None:
    mode = stat.S_IMODE((server.state_dir / "api-token").stat().st_mode)
    assert mode == 0o600
    with server.client(token=None) as anon, server.client(token="wrong-token-xxxxxxxx") as bad:
        for path in ("/api/v1/jobs", "/api/v1/nodes", "/metrics", "/openapi.json", "/"):
            for c in (anon, bad):
                r = c.get(path)
                assert r.status_code == 401, (path, r.status_code)
                assert "traceback" not in r.text.lower()
        r = anon.post("/api/v1/jobs/x/cancel")
        assert r.status_code == 401 and "api-token" in r.json()["detail"]
        page = anon.get("/", headers={"accept": "text/html"})  # a browser gets the form
        assert page.status_code == 401 and 'action="/login"' in page.text
    with server.client() as c:
        for path in ("/api/v1/jobs", "/api/v1/nodes", "/metrics", "/openapi.json", "/"):
            r = c.get(path)
            assert r.status_code == 200, path
            assert "script-src 'self'" in r.headers["content-security-policy"]


def test_login_cookie_and_cross_site_posts(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        assert c.post("/login", data={"token": "nope"}).status_code == 401
        r = c.post("/login", data={"token": server.token})
        assert r.status_code == 303
        cookie = r.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        assert server.token not in r.headers["set-cookie"]
        assert c.get("/api/v1/jobs").status_code == 200  # the cookie alone
        job = c.get("/api/v1/jobs").json()
        assert "jobs" in job
        # State changes with the cookie: only from the dashboard's own script.
        assert c.post("/api/v1/nodes/a/restore").status_code == 403
        evil = {"x-perdure-csrf": "1", "origin": "http://evil.example"}
        assert c.post("/api/v1/nodes/a/restore", headers=evil).status_code == 403
        cross = {"x-perdure-csrf": "1", "sec-fetch-site": "cross-site"}
        assert c.post("/api/v1/nodes/a/restore", headers=cross).status_code == 403
        same = {"x-perdure-csrf": "1", "origin": server.url, "sec-fetch-site": "same-origin"}
        assert c.post("/api/v1/nodes/a/restore", headers=same).status_code == 202
        assert c.get("/api/v1/jobs", headers={"x-http-method-override": "POST"}).status_code == 200
        assert c.request("DELETE", "/api/v1/jobs/x", headers=same).status_code == 405


def test_submit_runs_to_success_with_logs_and_events(server: Server) -> None:
    with server.client() as c:
        job = server.submit(c, spec("hello", QUICK))
        d = server.wait_state(c, job, {"SUCCEEDED", "FAILED"})
        assert d["state"] == "SUCCEEDED"
        cli = subprocess.run([*PERDURE, "--state-dir", str(server.state_dir), "describe", job,
                              "--json"], capture_output=True, text=True, check=True)
        described = json.loads(cli.stdout)
        for key in ("id", "name", "state", "attempt", "replicas", "events", "error"):
            assert d[key] == described[key], key  # the same code as `perdure describe --json`
        log = c.get(f"/api/v1/jobs/{job}/logs", params={"stream": "stdout"}).json()
        assert "hello from the api" in log["text"] and log["next_offset"] == log["size"]
        part = c.get(f"/api/v1/jobs/{job}/logs",
                     params={"stream": "stdout", "offset": 3, "limit": 5}).json()
        assert part["offset"] == 3 and part["next_offset"] == 8
        events = c.get(f"/api/v1/jobs/{job}/events").json()
        states = [e["message"].split(":")[0] for e in events if e["kind"] in ("state", "running")]
        # a replica that ends before the controller's first look at it is never seen RUNNING
        assert states in (["QUEUED", "PENDING", "RUNNING", "SUCCEEDED"],
                          ["QUEUED", "PENDING", "SUCCEEDED"]), states
        later = c.get(f"/api/v1/jobs/{job}/events", params={"after": events[1]["id"]}).json()
        assert later == events[2:]
        with c.stream("GET", f"/api/v1/jobs/{job}/events",
                      headers={"accept": "text/event-stream"}) as s:
            body = "".join(s.iter_text())
        assert body.count("event: event") == len(events) and "event: end" in body
        resumed = {"accept": "text/event-stream", "last-event-id": str(events[1]["id"])}
        with c.stream("GET", f"/api/v1/jobs/{job}/events", headers=resumed) as s:
            body = "".join(s.iter_text())
        assert body.count("event: event") == len(events) - 2  # a reconnect resumes
        timeline = c.get(f"/api/v1/jobs/{job}/timeline").json()
        assert [a["attempt"] for a in timeline["attempts"]] == [1]
        assert {m["kind"] for m in timeline["marks"]} >= {"launch", "exit"}


def test_live_log_tail_by_server_sent_events(server: Server) -> None:
    with server.client() as c:
        job = server.submit(c, spec("tail"))
        server.wait_state(c, job, {"RUNNING"})
        seen: list[str] = []
        began = time.monotonic()
        with c.stream("GET", f"/api/v1/jobs/{job}/logs",
                      headers={"accept": "text/event-stream"}) as s:
            for line in s.iter_lines():
                if line.startswith("data: "):
                    seen.append(json.loads(line[6:])["text"])
                if sum(t.count("tick") for t in seen) >= 5 or time.monotonic() - began > 20:
                    break
        assert sum(t.count("tick") for t in seen) >= 5, seen
        assert c.post(f"/api/v1/jobs/{job}/cancel").status_code == 202
        assert server.wait_state(c, job, {"CANCELLED"})["state"] == "CANCELLED"
        assert c.get(f"/api/v1/jobs/{job}/logs", params={"replica": "nope"}).status_code == 404
        assert c.get(f"/api/v1/jobs/{job}/logs", params={"attempt": 9}).status_code == 404


def test_cancel_preempt_resume(server: Server) -> None:
    with server.client() as c:
        job = server.submit(c, spec("pr"))
        server.wait_state(c, job, {"RUNNING"})
        r = c.post(f"/api/v1/jobs/{job}/preempt", params={"hold": "true"})
        assert r.status_code == 202 and r.json()["command"] == "preempt"
        server.wait_state(c, job, {"SUSPENDED"})
        assert c.post(f"/api/v1/jobs/{job}/resume").status_code == 202
        d = server.wait_state(c, job, {"RUNNING"})
        assert d["attempt"] == 2
        assert c.post(f"/api/v1/jobs/{job}/cancel").status_code == 202
        server.wait_state(c, job, {"CANCELLED"})
        assert c.post("/api/v1/jobs/ghost-000000/cancel").status_code == 404
        assert c.get("/api/v1/jobs/ghost-000000/cancel").status_code == 405  # POST only


def test_node_drain_and_restore(server: Server) -> None:
    with server.client() as c:
        job = server.submit(c, spec("drained", replicas=2))
        d = server.wait_state(c, job, {"RUNNING"})
        node = d["replicas"][0]["node"]
        assert c.post(f"/api/v1/nodes/{node}/drain").status_code == 202
        deadline = time.monotonic() + 20
        while True:
            nodes = {n["name"]: n for n in c.get("/api/v1/nodes").json()}
            d = c.get(f"/api/v1/jobs/{job}").json()
            moved = all(r["node"] != node for r in d["replicas"] if r["state"] == "RUNNING")
            if nodes[node]["state"] == "DRAINED" and moved and d["state"] == "RUNNING":
                break
            assert time.monotonic() < deadline, (nodes, d["replicas"])
            time.sleep(0.1)
        assert nodes[node]["free"] == 0
        assert c.post(f"/api/v1/nodes/{node}/restore").status_code == 202
        deadline = time.monotonic() + 10
        while c.get("/api/v1/nodes").json()[0]["state"] != "READY":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        r = c.post("/api/v1/nodes/zz/drain")
        assert r.status_code == 404 and "the cluster has a, b" in r.json()["detail"]
        c.post(f"/api/v1/jobs/{job}/cancel")
        server.wait_state(c, job, {"CANCELLED"})


def test_bad_specs_are_422_naming_the_field(server: Server) -> None:
    with server.client() as c:
        def post(body: bytes | str, ctype: str = "application/yaml") -> httpx.Response:
            return c.post("/api/v1/jobs", content=body, headers={"content-type": ctype})

        r = post("name: x\npools: [{name: worker, replicas: -1, command: [python]}]\n")
        assert r.status_code == 422
        assert ["body", "pools", 0, "replicas"] in [e["loc"] for e in r.json()["detail"]]
        r = post(json.dumps({"name": "x", "pools": [{"name": "w", "command": "python t.py"}]}),
                 "application/json")
        assert r.status_code == 422 and "argv list" in r.text
        r = post("name: x\nqueue: gpu\npools: [{name: worker, command: [python]}]\n")
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "queue"]
        r = post("name: [unclosed")
        assert r.status_code == 422 and "not valid YAML" in r.text
        assert post(b"\xff\xfe").status_code == 422
        r = post(b"\x00")  # found by the fuzz test: a 500 before
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body"]
        assert post("x" * 300_000).status_code == 413
        for r in (post("name: x\nbogus: 1\npools: [{name: w, command: [python]}]"),):
            assert r.status_code == 422 and ["body", "bogus"] in [e["loc"] for e in
                                                                 r.json()["detail"]]
            assert "Traceback" not in r.text
        assert c.get("/api/v1/jobs", params={"limit": 0}).status_code == 422
        assert c.get("/api/v1/jobs", params={"state": "NOPE"}).status_code == 422


def _samples(c: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(c.get("/metrics").text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_parse_and_move_with_jobs(server: Server) -> None:
    with server.client() as c:
        before = _samples(c)
        names = {n for n, _ in before}
        assert {"perdure_jobs", "perdure_replicas", "perdure_nodes",
                "perdure_controller_tick_seconds_bucket",
                "perdure_failure_detection_seconds_count"} <= names
        done = ("perdure_jobs", (("state", "SUCCEEDED"),))
        code = ("import sys; from perdure.runtime import goodput\n"
                "with goodput.step(1): pass\ngoodput.flush(); sys.exit(0)")
        job = server.submit(c, spec("metered", code))  # a step: a goodput to export
        server.wait_state(c, job, {"SUCCEEDED"})
        after = _samples(c)
        assert after[done] == before.get(done, 0) + 1
        assert after[("perdure_job_retries_total", (("job", job),))] == 0
        assert ("perdure_replica_restarts_total", (("job", job),)) in after
        assert ("perdure_job_goodput_ratio", (("job", job),)) in after
        assert after[("perdure_controller_tick_seconds_count", ())] > before[
            ("perdure_controller_tick_seconds_count", ())]
        flaky = server.submit(c, spec("flaky", "import sys; sys.exit(3)",
                                      restart={"max_replica_restarts": 2, "max_job_retries": 0}))
        server.wait_state(c, flaky, {"FAILED"})
        after = _samples(c)
        assert after[("perdure_replica_restarts_total", (("job", flaky),))] == 2
        assert after[("perdure_failure_detection_seconds_count", ())] >= 3


def test_remote_bind_needs_allow_remote(tmp_path: Path) -> None:
    r = subprocess.run([*PERDURE, "serve", "--host", "0.0.0.0", "--state-dir",
                        str(tmp_path / "s")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--allow-remote" in r.stderr and "Traceback" not in r.stderr


def test_second_server_needs_no_controller(server: Server, tmp_path: Path) -> None:
    r = subprocess.run([*PERDURE, "serve", "--port", "0", "--state-dir", str(server.state_dir)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--no-controller" in r.stderr
    (tmp_path / "state").symlink_to(server.state_dir)
    other = start_server(tmp_path, "--no-controller")
    try:
        with other.client(token=server.token) as c:
            assert c.get("/api/v1/jobs").status_code == 200
            job = other.submit(c, spec("elsewhere", QUICK))  # the first server's controller
            server.wait_state(c, job, {"SUCCEEDED"})
    finally:
        assert "Traceback" not in stop_server(other)


def test_perdure_without_the_extra_says_how_to_get_it(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['fastapi'] = None; sys.argv = ['perdure', '--state-dir', "
            f"{str(tmp_path)!r}, 'serve']; from perdure.cli.main import main; main()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "perdure[serve]" in r.stderr


DEMO = Path(__file__).with_name("demo_train.py")


def test_a_recovered_failure_is_the_last_failure_and_the_list_agrees_on_the_step(
        server: Server) -> None:
    with server.client() as c:
        job = server.submit(c, spec("recovering", replicas=2, command=DEMO))
        deadline = time.monotonic() + 60
        while True:  # demo_train.py's rank 1 crashes at step 30 and is restarted
            d = c.get(f"/api/v1/jobs/{job}").json()
            if d["last_failure"] and d["state"] == "RUNNING":
                break
            assert time.monotonic() < deadline, d["events"][-5:]
            time.sleep(0.1)
        assert d["error"] is None and d["last_failure"]["recovered"] is True
        assert d["last_failure"]["code"] == "USER_CODE"
        listed = next(j for j in c.get("/api/v1/jobs").json()["jobs"] if j["id"] == job)
        assert listed["error"] is None and listed["last_failure"]["code"] == "USER_CODE"
        assert c.post(f"/api/v1/jobs/{job}/cancel").status_code == 202
        d = server.wait_state(c, job, {"CANCELLED"})
        assert d["error"] == {"code": "CANCELLED", "message": "cancelled by user"}
        assert d["last_failure"] is None
        listed = next(j for j in c.get("/api/v1/jobs").json()["jobs"] if j["id"] == job)
        assert (listed["step"], listed["total_steps"]) == (d["step"], d["total_steps"])
        assert listed["step"] is not None and listed["step"] > 0
        assert listed["error"] == d["error"]
