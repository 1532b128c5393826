"""Hostile and careless specs: each is refused fast, naming the field or the line, never a
traceback; what is accepted stays small however the YAML is written."""

from __future__ import annotations

import time

import pytest

from perdure.core.clusterspec import parse_cluster
from perdure.core.spec import parse_job_spec
from perdure.core.specread import SpecError

POOL = "pools: [{name: w, command: [python, t.py]}]\n"
LOL = "\n".join(
    [f"l0: &l0 [{', '.join(['lol'] * 9)}]"]
    + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
)


def refused(text: str | bytes, *needles: str) -> str:
    began = time.process_time()
    with pytest.raises(SpecError) as err:
        parse_job_spec(text, "job.yaml")
    assert time.process_time() - began < 2.0
    message = str(err.value)
    assert message.startswith("job.yaml: ")
    for n in needles:
        assert n in message, message
    assert len(message) < 4000, len(message)
    return message


@pytest.mark.parametrize(
    ("field", "value"),
    [("restart: {stop_grace_seconds: %s}", "restart.stop_grace_seconds"),
     ("preemption: {grace_seconds: %s}", "preemption.grace_seconds"),
     ("scheduling: {placement_timeout_seconds: %s}", "scheduling.placement_timeout_seconds"),
     ("restart: {round_grace_seconds: %s}", "restart.round_grace_seconds")],
)
@pytest.mark.parametrize("number", [".inf", ".nan", "-.inf", "1e400"])
def test_non_finite_numbers_are_refused(field: str, value: str, number: str) -> None:
    refused(f"name: a\n{POOL}{field % number}\n", value, "finite")


@pytest.mark.parametrize(
    ("text", "field"),
    [("priority: 99999999999999999999999", "priority"),
     ("pools: [{name: w, slots: 99999999999999999999, command: [x]}]", "pools.0.slots"),
     ("restart: {max_replica_restarts: 1e30}", "restart.max_replica_restarts"),
     ("restart: {transient_exit_codes: [1, 99999999999999]}", "restart.transient_exit_codes"),
     ("restart: {stop_grace_seconds: 1e300}", "restart.stop_grace_seconds")],
)
def test_out_of_range_numbers_are_refused(text: str, field: str) -> None:
    body = text if text.startswith("pools") else f"{POOL}{text}"
    refused(f"name: a\n{body}\n", field)


def test_an_alias_bomb_is_refused_fast_with_a_short_message() -> None:
    refused(f"name: a\n{POOL}{LOL}\n", "aliases expand")


def test_aliases_in_a_valid_spec_cannot_multiply_its_size() -> None:
    big = "x" * 4000
    text = (f"name: a\nenv: &e {{A: {big}, B: {big}}}\npools:\n"
            + "".join(f"  - {{name: p{i}, command: [x], env: *e}}\n" for i in range(60)))
    refused(text, "aliases expand")
    few = text.split("  - ")[0] + "  - {name: p0, command: [x], env: *e}\n"
    assert len(parse_job_spec(few).model_dump_json()) < 20_000


def test_deep_nesting_non_utf8_duplicates_and_recursion() -> None:
    refused(f"name: a\n{POOL}env: " + "[" * 5000 + "]" * 5000, "nested deeper")
    refused(b"name: a\xff\n", "not UTF-8", "line 1")
    refused(f"name: a\nname: b\n{POOL}", "duplicate key 'name'", "line 2")
    refused(f"name: a\n{POOL}env: {{A: 1, A: 2}}\n", "duplicate key 'A'")
    refused("name: a\nx: &a [*a]\n", "recursive alias")
    refused("name: a\npriority: " + "9" * 5000 + "\n", "cannot be read")


@pytest.mark.parametrize("text", ["name: a\x00b\n", "\x00", "name: a\x07\n", b"name: \x00"])
def test_unprintable_characters_in_the_document_are_named(text: str | bytes) -> None:
    with pytest.raises(SpecError, match="not valid YAML: unacceptable character"):
        parse_job_spec(text)
    with pytest.raises(SpecError, match="unacceptable character"):
        parse_cluster(text if isinstance(text, str) else text.decode())


def test_merge_keys_may_be_overridden() -> None:
    spec = parse_job_spec("name: a\npools: [{<<: {name: w, command: [x]}, name: v}]\n")
    assert spec.pools[0].name == "v"


@pytest.mark.parametrize(
    ("text", "field"),
    [('pools: [{name: w, command: ["py", "a\\0b"]}]', "pools.0.command"),
     ('env: {"A=B": c}\n' + POOL, "env"),
     ('env: {"": c}\n' + POOL, "env"),
     ('pools: [{name: w, command: [x], env: {"K=V": c}}]', "pools.0.env"),
     ('env: {A: "v\\0"}\n' + POOL, "env"),
     ('workdir: "/tmp\\0x"\n' + POOL, "workdir"),
     ("env: {A: " + "é" * 40_000 + "}\n" + POOL, "env")],
)
def test_arguments_and_environment_that_exec_would_refuse(text: str, field: str) -> None:
    refused(f"name: a\n{text}\n", field)


def test_limits_a_user_never_hits_by_accident() -> None:
    pools = "".join(f"  - {{name: p{i}, replicas: 1024, command: [x]}}\n" for i in range(200))
    refused(f"name: a\npools:\n{pools}", "pools")
    two = "".join(f"  - {{name: p{i}, replicas: 9000, command: [x]}}\n" for i in range(2))
    refused(f"name: a\npools:\n{two}", "18000 replicas", "16384")
    refused("name: a\n" + POOL + "env: {A: " + "x" * 200_000 + "}\n", "characters")


def test_errors_echo_values_cut_short() -> None:
    message = refused(f"name: a\n{POOL}priority: [{', '.join(['1'] * 3000)}]\n", "priority")
    assert "characters)" in message


def test_cluster_files_get_the_same_treatment() -> None:
    for text, needle in [("nodes: [{name: a, slots: .inf}]", "nodes.0.slots"),
                         ("backend: local\nbackend: fake\n", "duplicate key"),
                         ("nodes: [{name: a, slots: 99999999999999}]", "nodes.0.slots")]:
        with pytest.raises(SpecError) as err:
            parse_cluster(text, "c.yaml")
        assert needle in str(err.value)


@pytest.mark.parametrize("number", [".inf", "-.inf", ".nan", "1.0e+300", "0", "-5"])
def test_watchdog_hang_seconds_is_finite_and_bounded(number: str) -> None:
    refused(f"name: a\n{POOL}watchdog: {{hang_seconds: {number}}}\n",
            "watchdog.hang_seconds", "finite")


def test_every_spec_model_inherits_the_validated_base() -> None:
    from pydantic import BaseModel

    from perdure.core.clusterspec import ClusterSpec
    from perdure.core.spec import JobSpec
    from perdure.core.specbase import SpecModel

    seen: set[type] = set()
    todo: list[type] = [JobSpec, ClusterSpec]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        assert issubclass(model, SpecModel), f"{model.__name__} skips the spec's validation"
        for field in model.model_fields.values():
            for arg in _types(field.annotation):
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    todo.append(arg)
    assert len(seen) >= 10


def _types(annotation: object) -> list[object]:
    import typing

    args = typing.get_args(annotation)
    return [annotation] if not args else [t for a in args for t in _types(a)]
