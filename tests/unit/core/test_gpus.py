"""GPUs and local ranks in the pure core: the spec, placement, the launch env, NCCL failures."""

from __future__ import annotations

import pytest
from tests.helpers.sim import Sim, spec

from perdure.backends.fake import FakeRun
from perdure.core.devices import split_host_gpus
from perdure.core.events import ErrorInfo, Launch
from perdure.core.model import Job
from perdure.core.policy import Action, Failure, classify, nccl_kind
from perdure.core.records import Node
from perdure.core.replica import make_replicas
from perdure.core.scheduler import Capacity, can_ever_fit, shortfall_message
from perdure.core.spec import parse_job_spec
from perdure.core.specread import SpecError
from perdure.core.states import JobState
from perdure.core.tick import Snapshot
from perdure.runtime.ranks import device_index, local_rank_env, process_name, rank_file


def gpu_pool(replicas: int, gpus: int, procs: int = 1) -> list[dict[str, object]]:
    return [{"name": "worker", "replicas": replicas, "command": ["python", "t.py"],
             "gpus": gpus, "procs_per_replica": procs}]


def gpu_sim(nodes: dict[str, tuple[int, int]], ids: dict[str, tuple[str, ...]] | None = None
            ) -> Sim:
    sim = Sim(nodes={n: s for n, (s, _) in nodes.items()}, script=lambda launch: FakeRun())
    sim.snap = Snapshot({}, {n: Node(n, s, gpus=g, gpu_ids=(ids or {}).get(n, ()))
                             for n, (s, g) in nodes.items()}, sim.quotas)
    return sim


def launches_of(sim: Sim, job_id: str) -> dict[str, Launch]:
    out = sim.step()
    return {d.replica: d for d in out.decisions if isinstance(d, Launch)}


# ---- spec -----------------------------------------------------------------------------------


def test_gpus_and_procs_default_to_none_and_one() -> None:
    pool = spec().pools[0]
    assert (pool.gpus, pool.procs_per_replica) == (0, 1)


@pytest.mark.parametrize(("fields", "needle"), [
    ({"gpus": 3, "procs_per_replica": 2}, "gpus (3) is not a multiple of procs_per_replica (2)"),
    ({"gpus": -1}, "pools.0.gpus"),
    ({"procs_per_replica": 0}, "pools.0.procs_per_replica"),
    ({"procs_per_replica": 2, "min_replicas": 1}, "cannot be combined"),
])
def test_bad_gpu_fields_name_the_field(fields: dict[str, object], needle: str) -> None:
    pool = {"name": "worker", "replicas": 2, "command": ["python", "t.py"], **fields}
    import yaml

    with pytest.raises(SpecError, match=None) as err:
        parse_job_spec(yaml.safe_dump({"name": "j", "pools": [pool]}))
    assert needle in str(err.value), str(err.value)


# ---- placement ------------------------------------------------------------------------------


def test_each_replica_gets_disjoint_gpus_and_its_processes_the_torchrun_env() -> None:
    sim = gpu_sim({"a": (8, 4), "b": (8, 4)})
    j = sim.submit(spec(pools=gpu_pool(4, 2, procs=2)))
    launches = launches_of(sim, j)
    devices = {name: launch.env["CUDA_VISIBLE_DEVICES"] for name, launch in launches.items()}
    by_node: dict[str, set[str]] = {}
    for name, launch in launches.items():
        ids = set(devices[name].split(","))
        assert len(ids) == 2
        assert not ids & by_node.get(launch.node, set()), devices  # disjoint on a node
        by_node.setdefault(launch.node, set()).update(ids)
    env = launches["worker-3"].env
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"],
            env["GROUP_RANK"], env["GROUP_WORLD_SIZE"], env["ROLE_RANK"],
            env["ROLE_WORLD_SIZE"]) == ("6", "8", "0", "2", "3", "4", "6", "8")
    assert env["PERDURE_PROCS_PER_REPLICA"] == "2" and env["PERDURE_GPUS"] == "2"
    assert launches["worker-3"].gpus == 2
    rank1 = local_rank_env(env, 1)  # what the supervisor gives local rank 1
    assert (rank1["RANK"], rank1["LOCAL_RANK"], rank1["ROLE_RANK"]) == ("7", "1", "7")
    assert rank1["CUDA_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"]


def test_gpu_ids_are_the_nodes_names_for_them_and_cpu_replicas_see_none() -> None:
    sim = gpu_sim({"a": (4, 2)}, ids={"a": ("GPU-x", "GPU-y")})
    j = sim.submit(spec(pools=[*gpu_pool(1, 2), {"name": "cpu", "replicas": 1,
                                                  "command": ["python", "t.py"]}]))
    launches = launches_of(sim, j)
    assert launches["worker-0"].env["CUDA_VISIBLE_DEVICES"] == "GPU-x,GPU-y"
    assert launches["cpu-0"].env["CUDA_VISIBLE_DEVICES"] == ""  # the GPUs are worker-0's


def test_a_job_waits_for_gpus_held_by_another_and_gets_them_when_freed() -> None:
    runs = {"first": FakeRun(seconds=5.0)}
    sim = Sim(nodes={"a": 8}, script=lambda launch: runs.get(launch.job_id.split("-")[0],
                                                             FakeRun()))
    sim.snap = Snapshot({}, {"a": Node("a", 8, gpus=2)}, sim.quotas)
    first = sim.submit(spec(name="first", pools=gpu_pool(1, 2)))
    sim.step()
    second = sim.submit(spec(name="second", pools=gpu_pool(1, 1)))
    sim.step()
    assert sim.job(second).state is JobState.QUEUED  # slots are free, GPUs are not
    assert "GPUs" in sim.job(second).wait_reason
    for _ in range(100):
        sim.step(0.2)
        if sim.job(second).state is not JobState.QUEUED:
            break
    assert sim.job(first).state is JobState.SUCCEEDED
    assert sim.job(second).replicas[0].devices == [0]


def test_can_ever_fit_counts_gpus_per_node() -> None:
    nodes = {"a": Node("a", 16, gpus=4), "b": Node("b", 16, gpus=4)}
    cap = Capacity(nodes, {}, [])
    fits = Job("j", spec(pools=gpu_pool(2, 4)), "/", 0.0, replicas=make_replicas(
        spec(pools=gpu_pool(2, 4))))
    too_wide = spec(pools=gpu_pool(1, 8))  # 8 GPUs in all, but never 8 on one node
    assert can_ever_fit(fits, cap)
    assert not can_ever_fit(Job("k", too_wide, "/", 0.0, replicas=make_replicas(too_wide)), cap)
    assert "8 GPUs, 8 healthy" in shortfall_message(Job("k", too_wide, "/", 0.0), 32, 8)


def test_host_gpus_are_split_between_virtual_nodes_without_overlap() -> None:
    assert split_host_gpus([None], ["2", "3"]) == [("2", "3")]
    assert split_host_gpus([1, None, None], ["0", "1", "2", "3"]) == [("0",), ("1", "2"), ("3",)]
    assert split_host_gpus([2, 2], []) == [("0", "1"), ("2", "3")]  # virtual: none on the host
    assert split_host_gpus([0, None], ["0"]) == [(), ("0",)]


# ---- local ranks ----------------------------------------------------------------------------


def test_device_index_gives_each_local_rank_its_share() -> None:
    assert [device_index(k, 2, 4) for k in range(2)] == [0, 2]
    assert [device_index(k, 4, 4) for k in range(4)] == [0, 1, 2, 3]
    assert device_index(3, 8, 8) == 3  # torchrun on a node: LOCAL_RANK is the device


def test_per_rank_files_keep_rank_zero_where_it_was() -> None:
    assert rank_file("error.json", 0) == "error.json"
    assert rank_file("error.json", 2) == "error.2.json"
    assert process_name("worker-1", {}) == "worker-1"
    assert process_name("worker-1", {"PERDURE_PROCS_PER_REPLICA": "2", "LOCAL_RANK": "1"}) == \
        "worker-1.rank1"


# ---- NCCL failures --------------------------------------------------------------------------

TIMEOUT = ("[PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated "
           "with exception: [Rank 1] Watchdog caught collective operation timeout: "
           "WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=5000) ran "
           "for 5084 milliseconds before timing out.")
CUDA = ("NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, unhandled cuda "
        "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
        "ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\n"
        "Cuda failure 'out of memory'")
USAGE = ("NCCL error in: ProcessGroupNCCL.cpp:1970, invalid usage (run with NCCL_DEBUG=WARN "
         "for details), NCCL version 2.21.5\nncclInvalidUsage: This usually reflects invalid "
         "usage of NCCL library.\nDuplicate GPU detected : rank 1 and rank 0 both on CUDA "
         "device 1000")
REMOTE = ("NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a "
          "network error, NCCL version 2.21.5\nncclRemoteError: A call failed possibly due to "
          "a network error or a remote process exiting prematurely.")


@pytest.mark.parametrize(("message", "kind", "action"), [
    (TIMEOUT, "NCCL collective timeout", Action.RESTART),
    (CUDA, "NCCL CUDA error", Action.RESTART),
    (REMOTE, "NCCL communication error", Action.RESTART),
    (USAGE, "NCCL invalid usage", Action.FAIL),
])
def test_nccl_failures_are_classified_by_kind(message: str, kind: str, action: Action) -> None:
    error = ErrorInfo("DistBackendError", message, source="stderr")
    assert nccl_kind(error) == kind
    # the watchdog aborts: exit 134 would otherwise be a plain transient exit code
    verdict = classify(Failure("worker-1", False, 134, 6, error=error), spec())
    assert (verdict.action, verdict.reason) == (action, kind)
    assert f"Termination reason: {kind}: DistBackendError" in verdict.message


def test_other_errors_are_not_nccl() -> None:
    assert nccl_kind(ErrorInfo("ValueError", "bad shape")) is None
    assert nccl_kind(ErrorInfo("RuntimeError", "Connection closed by peer [gloo]")) is None
    assert classify(Failure("w", False, 1, error=ErrorInfo("ValueError", "x")),
                    spec()).action is Action.FAIL


def test_hot_swap_takes_the_gpus_a_lower_priority_job_holds() -> None:
    """Slots are free on the surviving node, its GPUs are not: the GPUs decide the swap."""
    sim = gpu_sim({"a": (8, 2), "b": (8, 2)})
    high = sim.submit(spec(name="high", priority=10, pools=gpu_pool(1, 2)))
    sim.run_until(high, {JobState.RUNNING})
    low = sim.submit(spec(name="low", priority=1, pools=gpu_pool(1, 2)))
    sim.run_until(low, {JobState.RUNNING})
    node = sim.job(high).replicas[0].node
    assert node is not None and sim.job(low).replicas[0].node != node
    sim.command("fail-node", node)
    for _ in range(20):
        sim.step()
    assert any(f"hot-swap: preempting {low}" in m for m in sim.messages(high))
    assert sim.job(high).state is JobState.RUNNING
    assert sim.job(high).replicas[0].node != node
    assert sim.job(low).state is JobState.QUEUED
