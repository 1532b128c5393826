"""bench/ray.py --quick: perdure on Ray against Ray Train on fresh namespace hosts, one worker
kill and one host loss each; the figures come out as ratios (the numbers are not judged here:
the full run's are recorded in docs/benchmarks.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hosts import HostsUnavailable, check_possible

BENCH = Path(__file__).resolve().parents[3] / "bench" / "ray.py"
NUMBER = r"\s+(?:-?\d+\.\d+|-)"


@pytest.mark.ray_long
@pytest.mark.timeout(900)
def test_quick_run_prints_every_figure_for_both_systems() -> None:
    try:
        check_possible()
    except HostsUnavailable as exc:
        pytest.skip(f"no Ray hosts: {exc}")
    pytest.importorskip("pandas", reason="Ray Train needs the bench-ray extra: "
                        "pip install -e '.[bench-ray]'")
    pytest.importorskip("ray.train.torch")
    r = subprocess.run([sys.executable, str(BENCH), "--quick"], capture_output=True, text=True,
                       timeout=840)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-5000:]
    assert "goodput = the step seconds" in out, out
    for system in ("raytrain", "perdure"):
        # kills, recovery median/min/max, ratio, goodput, ratio, step time: all measured
        assert re.search(rf"^{system}\s+1(?:{NUMBER}){{3}}\s+\d+\.\d+\s+\d\.\d{{3}}\s+\d+\.\d+",
                         out, re.M), out
        # host b's loss: the ranks it held, the replacement group started, the next step
        assert re.search(rf"^{system}\s+[\d,]+(?:{NUMBER}){{5}}", out, re.M), out
    assert re.search(r"^goals, perdure: recovery <= 0\.3x Ray Train's: (met|NOT met)", out, re.M)
    assert "node loss detected within 5 s" in out, out
