"""`resume:` and `integrations:` are perdure's launches' doing: an export says it drops them."""

from __future__ import annotations

from perdure.core.spec import parse_job_spec
from perdure.export.k8s import spec_gaps


def test_resume_and_integrations_are_named_as_gaps() -> None:
    spec = parse_job_spec(
        "name: j\npools: [{name: w, command: [python, t.py], integrations: [lightning], "
        "resume: {when_exists: out/ckpt.pt, args: [--init_from=resume]}}]\n")
    fields = [g.field for g in spec_gaps(spec)]
    assert "pools.0.resume" in fields and "pools.0.integrations" in fields
