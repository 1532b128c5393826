"""The user's environment in an exported JobSet (issue 20.9): names Kubernetes refuses and
names perdure sets are refused naming the field; a `$(...)` in a value perdure writes reaches
the pod as written."""

from __future__ import annotations

import json

import pytest
from test_export_k8s import IMAGE, pods, spec_of

from perdure.core.spec import parse_job_spec
from perdure.export.gaps import ExportError
from perdure.export.k8s import K8sOptions, export_k8s


def refused(text: str, *needles: str) -> None:
    with pytest.raises(ExportError) as err:
        export_k8s(spec_of(text), K8sOptions(IMAGE))
    for n in needles:
        assert n in str(err.value), str(err.value)


@pytest.mark.parametrize("name", ["A\tB", "A\nB", "ÜBER", "1ST", "MY VAR", "a$b", "été"])
def test_env_names_kubernetes_refuses_are_named(name: str) -> None:
    refused(f"env: {{{json.dumps(name)}: x}}\n", "env.", "Kubernetes refuses")
    refused(f"pools: [{{name: w, command: [t], env: {{{json.dumps(name)}: x}}}}]\n",
            "pools.0.env.", "Kubernetes refuses")


@pytest.mark.parametrize("name", ["PERDURE_POD_INDEX", "PERDURE_JOBSET_RESTARTS", "RANK",
                                  "WORLD_SIZE", "MASTER_ADDR", "PERDURE_CHECKPOINT_DIR",
                                  "LOCAL_RANK", "PERDURE_RANK_OFFSET"])
def test_a_user_variable_never_shadows_perdures(name: str) -> None:
    refused(f"env: {{{name}: '7'}}\n", f"env.{name}", "shadow")
    refused(f"pools: [{{name: w, command: [t], env: {{{name}: '7'}}}}]\n",
            f"pools.0.env.{name}", "shadow")


def test_names_kubernetes_takes_and_overridable_defaults_are_kept() -> None:
    spec = spec_of("env: {OMP_NUM_THREADS: '4', my.var-1: 'a $(B) $$', _X: y}\n")
    for _, _, env, _ in pods(spec, export_k8s(spec, K8sOptions(IMAGE)).jobset):
        assert env["OMP_NUM_THREADS"] == "4"
        assert env["my.var-1"] == "a $(B) $$" and env["_X"] == "y"


@pytest.mark.parametrize("where", ["s3://bucket/$(PERDURE_POD_INDEX)/x", "/ckpt/$(HOME)$$/y",
                                   "gs://bucket/$$(RANK)"])
def test_a_checkpoint_dir_reaches_the_pod_as_written(where: str) -> None:
    spec = parse_job_spec(f"name: x\npools: [{{name: w, replicas: 2, command: [t]}}]\n"
                          f"checkpoint: {{dir: {json.dumps(where)}}}\n")
    every = pods(spec, export_k8s(spec, K8sOptions(IMAGE)).jobset)
    assert [env["PERDURE_CHECKPOINT_DIR"] for _, _, env, _ in every] == [where] * len(every)
