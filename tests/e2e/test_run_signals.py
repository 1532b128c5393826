"""`perdure run` as CI, `docker stop` and a closed terminal treat it, and two runs sharing a
state dir: real processes on the local backend."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

PERDURE = [sys.executable, "-m", "perdure.cli.main"]


def start_run(state: Path, spec: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PERDURE_WARM_POOL": "0"}
    return subprocess.Popen([*PERDURE, "--state-dir", str(state), "run", str(spec)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def sleeper(tmp: Path, name: str, seconds: float, marker: str) -> Path:
    spec = tmp / f"{name}.yaml"
    code = f"import time; time.sleep({seconds})  # {marker}"
    spec.write_text(f"name: {name}\npools: [{{name: w, command: [python, -c, '{code}']}}]\n")
    return spec


def replicas_with(marker: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in p.info["cmdline"] or []):
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def wait_for(pred: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError("timed out")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_cancel_the_job_like_ctrl_c(tmp_path: Path, sig: int) -> None:
    marker = uuid.uuid4().hex
    run = start_run(tmp_path / "state", sleeper(tmp_path, "sleepy", 600, marker))
    try:
        wait_for(lambda: replicas_with(marker), 60)
        time.sleep(0.3)
        run.send_signal(sig)
        out, _ = run.communicate(timeout=60)
    finally:
        run.kill()
    assert run.returncode == 1, out
    assert f"{signal.Signals(sig).name}: cancelling job" in out
    assert "CANCELLED" in out.splitlines()[-1], out
    wait_for(lambda: not replicas_with(marker), 10)  # no replica left without a controller


def test_a_second_run_takes_over_when_the_first_exits(tmp_path: Path) -> None:
    state = tmp_path / "state"
    go = tmp_path / "go"
    # The first job runs until the second `perdure run` says it follows it (however long its
    # start-up takes on a loaded machine: a fixed sleep here was a flake), then ends.
    first_spec = tmp_path / "first.yaml"
    code = (f"import os, time; t = time.time(); "
            f"[time.sleep(0.1) for _ in iter(lambda: os.path.exists({str(go)!r}) "
            f"or time.time() - t > 300, True)]")
    first_spec.write_text(f'name: first\npools: [{{name: w, command: [python, -c, "{code}"]}}]\n')
    first = start_run(state, first_spec)
    try:
        wait_for(lambda: (state / "controller.lock").exists(), 60)
        second = start_run(state, sleeper(tmp_path, "second", 2, uuid.uuid4().hex))
        try:
            lines: list[str] = []
            reader = threading.Thread(target=lambda: lines.extend(second.stdout or []),
                                      daemon=True)
            reader.start()
            wait_for(lambda: any("following the job" in line for line in lines), 120)
            go.touch()
            second.wait(timeout=120)
            reader.join(timeout=10)
            out2 = "".join(lines)
        finally:
            second.kill()
        out1, _ = first.communicate(timeout=60)
    finally:
        first.kill()
    assert first.returncode == 0, out1
    assert "this one drives the job now" in out2, out2
    assert second.returncode == 0 and out2.splitlines()[-1].endswith("SUCCEEDED"), out2


def test_sigterm_stops_a_controller_cleanly_leaving_replicas_to_the_next(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    state = tmp_path / "state"
    env = {**os.environ, "PERDURE_WARM_POOL": "0"}
    job = subprocess.run([*PERDURE, "--state-dir", str(state), "submit",
                          str(sleeper(tmp_path, "bg", 600, marker))], env=env, check=True,
                         capture_output=True, text=True).stdout.strip()
    ctl = subprocess.Popen([*PERDURE, "--state-dir", str(state), "controller"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: replicas_with(marker), 60)
        ctl.send_signal(signal.SIGTERM)
        out, _ = ctl.communicate(timeout=30)
        assert "controller stopped; replicas keep running" in out, out
        assert replicas_with(marker)  # left running for the next controller to adopt
    finally:
        ctl.kill()
        subprocess.run([*PERDURE, "--state-dir", str(state), "cancel", job], env=env,
                       capture_output=True)
        subprocess.run([*PERDURE, "--state-dir", str(state), "controller",
                        "--exit-when-idle"], env=env, capture_output=True, timeout=60)
        for p in replicas_with(marker):
            p.kill()
