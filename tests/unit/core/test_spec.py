"""A bad spec is rejected before anything runs, naming the field, the value and the fix."""

from __future__ import annotations

import pytest

from perdure.core.clusterspec import parse_cluster
from perdure.core.spec import parse_job_spec
from perdure.core.specread import SpecError

GOOD = """
name: mlp-ddp
queue: default
priority: 100
pools:
  - name: worker
    replicas: 4
    min_replicas: 2
    command: [python, train.py, --steps, "2000"]
    slots: 1
    memory_mb: 2048
env: {KEY: value}
restart:
  max_replica_restarts: 5
  max_job_retries: 3
  transient_exit_codes: [6, 134, 11, 139]
  rules: []
elastic: {mode: resize}
checkpoint: {dir: ./checkpoints/mlp-ddp}
preemption: {grace_seconds: 30}
"""


def test_the_design_example_is_valid() -> None:
    spec = parse_job_spec(GOOD)
    assert spec.total_replicas == 4 and spec.pools[0].min_replicas == 2
    assert spec.restart.scope == "group"


@pytest.mark.parametrize(
    ("change", "needles"),
    [
        (("name: mlp-ddp", "name: MLP_ddp"), ["name", "lowercase", "'MLP_ddp'"]),
        (("replicas: 4", "replicas: 0"), ["pools.0.replicas", "greater than or equal to 1", "0"]),
        (("min_replicas: 2", "min_replicas: 9"), ["min_replicas (9) is larger than replicas (4)"]),
        (('command: [python, train.py, --steps, "2000"]', "command: python train.py"),
         ["pools.0.command", "argv list", "['python', 'train.py']"]),
        (("mode: resize", "mode: shrink"), ["elastic.mode", "'resize' or 'pause'", "'shrink'"]),
        (("priority: 100", "priorty: 100"), ["priorty", "unknown field"]),
        (("memory_mb: 2048", "memory_mb: lots"), ["pools.0.memory_mb", "'lots'"]),
    ],
)
def test_bad_fields_are_named(change: tuple[str, str], needles: list[str]) -> None:
    with pytest.raises(SpecError) as err:
        parse_job_spec(GOOD.replace(*change), "job.yaml")
    text = str(err.value)
    assert text.startswith("job.yaml: invalid spec")
    for n in needles:
        assert n in text, text


def test_not_yaml_and_not_a_mapping() -> None:
    with pytest.raises(SpecError, match="not valid YAML"):
        parse_job_spec("name: [", "x.yaml")
    with pytest.raises(SpecError, match="expected a mapping"):
        parse_job_spec("- a", "x.yaml")


def test_rules_need_a_condition() -> None:
    bad = GOOD.replace("rules: []", "rules: [{action: fail}]")
    with pytest.raises(SpecError, match="at least one of exit_codes"):
        parse_job_spec(bad)


def test_cluster_file() -> None:
    c = parse_cluster("nodes: [{name: a, slots: 2}, {name: b, slots: 2}]\n"
                      "queues: [{name: default, quota: 4}]")
    assert [n.name for n in c.nodes] == ["a", "b"] and c.queues[0].quota == 4
    with pytest.raises(SpecError, match="node names must be unique"):
        parse_cluster("nodes: [{name: a, slots: 2}, {name: a, slots: 2}]")
    with pytest.raises(SpecError, match="needs at least one node"):
        parse_cluster("backend: local")
