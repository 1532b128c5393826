"""Property tests: generated specs and cluster files, valid, invalid and hostile.

Whatever the input, `parse_job_spec` / `parse_cluster` return within a bounded time and either
accept it or raise SpecError naming a field (or a line of the YAML); never another exception.
An accepted spec round-trips through the sqlite store unchanged. A few hundred examples run in
the default suite; `make soak` (marker `soak`) runs many more.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perdure.core.clusterspec import parse_cluster
from perdure.core.model import Job
from perdure.core.replica import make_replicas
from perdure.core.spec import parse_job_spec
from perdure.core.specread import SpecError
from perdure.store.sqlite import Store

FAST = settings(max_examples=100, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SOAK = settings(max_examples=3000, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
BOUND_SECONDS = 2.0  # CPU seconds: wall time on a loaded machine says little

names = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?\Z")
words = st.text(st.characters(codec="utf-8"), max_size=12)
env_keys = st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,8}\Z")
seconds = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)


def pools() -> st.SearchStrategy[list[dict[str, Any]]]:
    pool = st.fixed_dictionaries(
        {"name": names, "command": st.lists(words, min_size=1, max_size=4)},
        optional={"replicas": st.integers(1, 8), "slots": st.integers(1, 4),
                  "memory_mb": st.integers(16, 1 << 20),
                  "env": st.dictionaries(env_keys, words, max_size=3)},
    )
    return st.lists(pool, min_size=1, max_size=3, unique_by=lambda p: p["name"])


valid_specs = st.fixed_dictionaries(
    {"name": names, "pools": pools()},
    optional={
        "priority": st.integers(-1000, 1000),
        "env": st.dictionaries(env_keys, words, max_size=3),
        "workdir": words,
        "restart": st.fixed_dictionaries({}, optional={
            "max_replica_restarts": st.integers(0, 10), "max_job_retries": st.integers(0, 5),
            "transient_exit_codes": st.lists(st.integers(0, 255), max_size=4),
            "stop_grace_seconds": seconds, "round_grace_seconds": seconds,
            "scope": st.sampled_from(["group", "replica"])}),
        "scheduling": st.fixed_dictionaries({"placement_timeout_seconds": seconds}),
        "elastic": st.fixed_dictionaries({"mode": st.sampled_from(["resize", "pause"])}),
        "checkpoint": st.fixed_dictionaries({}, optional={"dir": words,
                                                          "every_steps": st.integers(1, 999)}),
        "preemption": st.fixed_dictionaries({"grace_seconds": seconds}),
    },
)

hostile_values = st.one_of(
    st.sampled_from([math.inf, -math.inf, math.nan, 10**30, -(10**30), 2**63, -1, 0, 1e300,
                     "", "\0", "a\0b", "x" * 5000, None, True, [], {}, [[[[[]]]]],
                     {"A=B": "c"}, {"": "x"}, "\ud800"]),
    st.integers(), st.floats(), words, st.lists(st.integers(), max_size=3),
    st.dictionaries(words, words, max_size=2),
)


def mutate(spec: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    """Replace or add one field, anywhere in the spec, with a hostile value."""
    node: Any = spec
    while isinstance(node, dict | list) and node and data.draw(st.booleans()):
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        child = node[data.draw(st.sampled_from(keys))]
        if not isinstance(child, dict | list) or not child:
            break
        node = child
    value = data.draw(hostile_values)
    if isinstance(node, dict):
        key = data.draw(st.one_of(st.sampled_from(list(node) or ["name"]), words))
        node[key] = value
    elif isinstance(node, list):
        node[data.draw(st.integers(0, len(node) - 1))] = value
    return spec


def hostile_yaml(deepest: int) -> st.SearchStrategy[str | bytes]:
    bomb = st.builds(
        lambda width, depth: "\n".join(
            [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
            + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, depth)]),
        st.integers(2, 12), st.integers(2, 10))
    deep = st.builds(lambda n, c: f"name: a\nenv: {c[0] * n}{c[1] * n}",
                     st.integers(1, deepest), st.sampled_from(["[]", "{}"]))
    dup = st.builds(lambda k: f"{k}: 1\n{k}: 2\n", st.sampled_from(["name", "pools", "x"]))
    recursive = st.just("name: &a [*a]\n")
    return st.one_of(bomb, deep, dup, recursive, st.binary(max_size=200),
                     st.text(max_size=200), st.just("name: a\npriority: " + "9" * 5000))


def accepts_or_names_a_field(parse: Callable[[str | bytes, str], Any], text: str | bytes) -> Any:
    began = time.process_time()
    try:
        result = parse(text, "f.yaml")
    except SpecError as exc:
        message = str(exc)
        lines = message.splitlines()
        assert lines[0].startswith("f.yaml: "), message
        if lines[0] == "f.yaml: invalid spec":
            assert len(lines) > 1 and all(line.startswith("  ") and ": " in line
                                          for line in lines[1:]), message
        assert len(message) < 5000, len(message)
        result = None
    assert time.process_time() - began < BOUND_SECONDS
    return result


def dump(spec: dict[str, Any]) -> str:
    return yaml.safe_dump(spec, allow_unicode=True)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return Store(tmp_path_factory.mktemp("fuzz") / "perdure.db")


def roundtrip(store: Store, spec_dict: dict[str, Any]) -> None:
    spec = accepts_or_names_a_field(parse_job_spec, dump(spec_dict))
    if spec is None:
        return
    job_id = f"{spec.name}-{store.db.execute('SELECT count(*) FROM jobs').fetchone()[0]}"
    store.submit(Job(id=job_id, spec=spec, spec_dir=str(Path("/")), created=1.0,
                     replicas=make_replicas(spec)))
    back = store.job(job_id)
    assert back is not None and back.spec == spec


def valid_body(store: Store, spec: dict[str, Any]) -> None:
    roundtrip(store, spec)


def invalid_body(store: Store, spec: dict[str, Any], data: st.DataObject) -> None:
    roundtrip(store, mutate(spec, data))


def hostile_body(text: str | bytes) -> None:
    accepts_or_names_a_field(parse_job_spec, text)
    accepts_or_names_a_field(parse_cluster, text)


clusters = st.fixed_dictionaries({}, optional={
    "backend": st.one_of(st.sampled_from(["local", "fake", "ray"]), words),
    "nodes": st.lists(st.fixed_dictionaries({"name": st.one_of(names, words),
                                             "slots": st.one_of(st.integers(), hostile_values)}),
                      max_size=3),
    "queues": st.lists(st.fixed_dictionaries({"name": names}, optional={
        "quota": st.one_of(st.integers(), hostile_values)}), max_size=3),
})


def cluster_body(cluster: dict[str, Any]) -> None:
    accepts_or_names_a_field(parse_cluster, dump(cluster))


@FAST
@given(spec=valid_specs)
def test_valid_specs_are_accepted_and_round_trip(store: Store, spec: dict[str, Any]) -> None:
    valid_body(store, spec)


@FAST
@given(spec=valid_specs, data=st.data())
def test_invalid_specs_name_a_field(store: Store, spec: dict[str, Any],
                                    data: st.DataObject) -> None:
    invalid_body(store, spec, data)


@FAST
@given(text=hostile_yaml(deepest=200))
def test_hostile_yaml_is_refused_in_bounded_time(text: str | bytes) -> None:
    hostile_body(text)


@FAST
@given(cluster=clusters)
def test_cluster_files_are_accepted_or_name_a_field(cluster: dict[str, Any]) -> None:
    cluster_body(cluster)


@pytest.mark.soak
@SOAK
@given(spec=valid_specs, data=st.data(), text=hostile_yaml(deepest=5000), cluster=clusters)
def test_fuzz_soak(store: Store, spec: dict[str, Any], data: st.DataObject, text: str | bytes,
                   cluster: dict[str, Any]) -> None:
    invalid_body(store, spec, data)
    hostile_body(text)
    cluster_body(cluster)
