"""The dashboard in a real browser (Debian's chromium driven by Playwright).

Screenshots of every page go to artifacts/serve/ (git-ignored) for a person to look at.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_harness import Server, spec

CHROMIUM = Path("/usr/lib/chromium/chromium")
ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts" / "serve"
DEMO = Path(__file__).with_name("demo_train.py")
HOSTILE = "<img src=x onerror=window.pwned=1>"  # demo_train.py prints it: never run it

playwright = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="needs Debian's chromium (apt-get install chromium)")


@pytest.fixture()
def page(server: Server) -> Iterator[Any]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        ctx = browser.new_context(viewport={"width": 1360, "height": 1000})
        pg = ctx.new_page()
        pg.problems = []  # console errors (a CSP violation is one) and page errors
        pg.on("console", lambda m: m.type == "error" and pg.problems.append(m.text))
        pg.on("pageerror", lambda e: pg.problems.append(str(e)))
        try:
            yield pg
        finally:
            browser.close()


def shot(pg: Any, name: str) -> None:
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_dashboard_login_job_live_log_and_cancel(server: Server, page: Any) -> None:
    pg = page
    expect = playwright.expect
    with server.client() as c:
        job = server.submit(c, spec("browser-demo", replicas=2, command=DEMO))
        server.submit(c, spec("quick-one", "print('done')"))
        server.wait_state(c, job, {"RUNNING"})

    pg.goto(server.url + "/")
    expect(pg.locator("form[action='/login']")).to_be_visible()
    shot(pg, "0-login")
    pg.fill("#token", "wrong-token")
    pg.click("button[type=submit]")
    expect(pg.locator(".login-error")).to_contain_text("Wrong token")
    pg.fill("#token", server.token)
    pg.click("button[type=submit]")
    pg.problems.clear()  # the 401s of the login page itself are expected

    row = pg.locator(f"tr[data-job='{job}']")
    expect(row.locator(".badge")).to_have_text("RUNNING")
    expect(row.locator(".num").first).to_be_visible()
    shot(pg, "1-jobs")

    row.locator("a.job-link").click()
    expect(pg.locator(".page-head .badge")).to_have_text("RUNNING")
    expect(pg.locator("svg.timeline rect.seg").first).to_be_visible()
    expect(pg.locator("svg.timeline .mk-launch").first).to_be_attached()
    expect(pg.locator("svg.timeline .mk-checkpoint").first).to_be_attached(timeout=10_000)
    expect(pg.locator("svg.timeline .mk-restart").first).to_be_attached(timeout=10_000)
    log = pg.locator("pre.log")
    expect(log).to_contain_text("tick")
    first = _last_tick(log.inner_text())
    expect(log).to_contain_text(f"tick {first + 5}", timeout=10_000)  # arrives live
    # Both streams by default, in time order (a step's two lines may come either way round).
    expect(log).to_contain_text(f"said {first + 5}")
    text = log.inner_text()
    assert text.index(f"said {first + 3}") < text.index(f"tick {first + 5}")
    shot(pg, "2a-log-merged")
    pg.select_option("select[aria-label=stream]", "stdout")
    expect(log).to_contain_text("said")
    assert "tick" not in log.inner_text()
    pg.select_option("select[aria-label=stream]", "all")
    pg.select_option("select[aria-label=replica]", "worker-1")
    expect(log).to_contain_text(HOSTILE)  # shown as text ...
    assert pg.evaluate("window.pwned === undefined")  # ... never run
    assert pg.locator("pre.log img").count() == 0
    expect(pg.locator(".events li").first).to_be_visible()
    shot(pg, "2-job-running")
    pg.screenshot(path=str(ARTIFACTS / "job-page-top.png"),  # docs/serve-job-page.png
                  clip={"x": 0, "y": 0, "width": 1360, "height": 860})
    # The restart is a failure the job recovered from: never the job's error.
    expect(pg.locator(".error-box.recovered")).to_contain_text("Last failure (recovered)")
    pg.click("nav a[data-nav=jobs]")
    expect(row.locator(".row-error.recovered")).to_contain_text("last failure (recovered)")
    shot(pg, "1a-jobs-recovered")
    row.locator("a.job-link").click()
    expect(pg.locator(".page-head .badge")).to_have_text("RUNNING")

    pg.once("dialog", lambda d: d.accept())
    began = time.monotonic()
    pg.click("button[data-action=cancel]")
    expect(pg.locator(".page-head .badge")).to_have_text(
        "CANCELLED", timeout=2_000)
    assert time.monotonic() - began < 2.0
    pg.wait_for_timeout(300)
    shot(pg, "3-job-cancelled")

    pg.click("nav a[data-nav=nodes]")
    expect(pg.locator("tr[data-node=a] .badge")).to_have_text("READY")
    pg.click("tr[data-node=b] button")
    expect(pg.locator("tr[data-node=b] .badge")).to_have_text(
        "DRAINED", timeout=5_000)
    shot(pg, "4-nodes")
    pg.click("tr[data-node=b] button")
    expect(pg.locator("tr[data-node=b] .badge")).to_have_text(
        "READY", timeout=5_000)
    assert pg.problems == []  # no script error, no CSP violation


def _last_tick(text: str) -> int:
    ticks = [int(line.split()[1]) for line in text.splitlines() if line.startswith("tick ")]
    return max(ticks) if ticks else 0


def big_state(tmp: Path) -> str:
    """1,000 jobs in a store and a 10 MB log for the newest (served without a controller)."""
    from perdure.controller.newjob import make_job
    from perdure.core.clusterspec import default_cluster
    from perdure.core.spec import parse_job_spec
    from perdure.core.states import JobState, ReplicaState
    from perdure.store.sqlite import Store

    store = Store(tmp / "state" / "perdure.db")
    jobs = []
    for i in range(1000):
        job = make_job(parse_job_spec(spec(f"bulk-{i % 7}-{i}", replicas=2)), str(tmp),
                       default_cluster(2), str(tmp / "state"))
        job.created += i * 1e-3
        job.state = [JobState.SUCCEEDED, JobState.FAILED, JobState.QUEUED][i % 3]
        jobs.append(job)
    big = jobs[-1]
    big.state, big.attempt = JobState.RUNNING, 1
    big.replicas[0].state, big.replicas[0].node = ReplicaState.RUNNING, "a"
    with store.transaction():
        for job in jobs:
            store._put_job(job, new=True)
    log = tmp / "state" / "logs" / big.id / "attempt-1" / "worker-0.err"
    log.parent.mkdir(parents=True)
    with log.open("w") as f:
        for i in range(110_000):
            f.write(f"step {i:06d} loss {1 / (i + 1):.6f} " + "." * 60 + "\n")
    store.close()
    return big.id


def test_a_thousand_jobs_and_a_ten_megabyte_log(tmp_path: Path, page: Any) -> None:
    from serve_harness import start_server, stop_server

    pg, expect = page, playwright.expect
    big = big_state(tmp_path)
    other = start_server(tmp_path, "--no-controller")
    try:
        pg.goto(other.url + "/login")
        pg.fill("#token", other.token)
        pg.click("button[type=submit]")
        expect(pg.locator(".pager").first).to_contain_text("1\u201350 of 1,000")
        assert pg.locator("tbody tr").count() == 50
        shot(pg, "5-thousand-jobs")
        pg.locator(".pager button:has-text('Older')").first.click()
        expect(pg.locator(".pager").first).to_contain_text("51\u2013100 of 1,000")
        pg.goto(f"{other.url}/#/jobs/{big}")
        log = pg.locator("pre.log")
        expect(log).to_contain_text("step 109999")
        shown = len(log.inner_text())
        assert shown < 70_000  # the tail, not 10 MB
        pg.click("button:has-text('Load earlier')")
        expect(log).not_to_have_text("", timeout=5_000)
        pg.wait_for_function("document.querySelector('pre.log').textContent.length > "
                             f"{shown + 60_000}")
        shot(pg, "6-big-log")
        assert pg.problems == [] or all("401" in p for p in pg.problems)
    finally:
        stop_server(other)
