"""One rank of a checkpoint integration test: ``python ckpt_worker.py SCENARIO ARGS_JSON``.

Reads RANK and WORLD_SIZE from the environment and joins a gloo group through a FileStore
(``args["store"]``). Scenarios write their findings as JSON to ``args["out"]`` (rank 0) so
the test asserts on facts, not on logs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
)

from perdure.runtime.checkpoint import Checkpointer, RankLocal, SavePolicy

PHASED = {"reshard"}  # scenarios that join (and leave) worlds of their own
RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))


def mlp(seed: int, hidden: int = 30) -> nn.Module:
    """A small MLP; 30 rows do not divide evenly by 4, so FSDP shards are uneven."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(10, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, 6))


def batch(step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * step + RANK)
    return torch.randn(8, 10, generator=g)


def train(model: nn.Module, optim: torch.optim.Optimizer, steps: range) -> None:
    for step in steps:
        loss = model(batch(step)).pow(2).mean()
        optim.zero_grad()
        loss.backward()
        optim.step()


def full_state(model: nn.Module, optim: torch.optim.Optimizer) -> dict[str, Any]:
    """The whole (unsharded) model and optimizer state, on every rank (collective)."""
    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return {
        "model": get_model_state_dict(model, options=opts),
        "optim": get_optimizer_state_dict(model, optim, options=opts),
    }


def first_difference(a: Any, b: Any, where: str = "") -> str | None:
    """Where two nested states first differ (None when equal)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{where}: tensor vs {type(b).__name__}"
        ok = a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
        return None if ok else f"{where}: tensors differ"
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return f"{where}: keys {sorted(map(str, set(a) ^ set(b)))} differ"
        for k in a:
            found = first_difference(a[k], b[k], f"{where}.{k}")
            if found:
                return found
        return None
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return f"{where}: lengths {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{where}[{i}]")
            if found:
                return found
        return None
    return None if a == b else f"{where}: {a!r} != {b!r}"


def fsdp(model: nn.Module) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    for layer in model.children():
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model


def join(store: str, world: int) -> None:
    """Join a fresh gloo world of ``world`` ranks (this process keeps its RANK)."""
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=RANK, world_size=world)


def sharded(seed: int) -> tuple[nn.Module, torch.optim.Optimizer, dict[str, Any]]:
    model = fsdp(mlp(seed))
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    return model, optim, {"model": model, "optim": optim, "step": -1}


def restore_and_compare(ckpt: Checkpointer, step: int, expected: str) -> dict[str, Any]:
    """Restore ``step`` into a differently initialised sharded model; compare on rank 0."""
    model, optim, state = sharded(seed=1)
    restored = ckpt.restore(state, step)
    got = full_state(model, optim)  # complete on rank 0 only (cpu_offload)
    found: dict[str, Any] = {"step": restored, "state_step": state["step"]}
    if RANK == 0:
        found["diff"] = first_difference(got, torch.load(expected, weights_only=True))
    return found


def save_and_record(
    ckpt: Checkpointer, model: nn.Module, optim: torch.optim.Optimizer, step: int, expected: str
) -> int:
    """Save ``step``; rank 0 records the full state it should restore to. Returns shard bytes."""
    directory = ckpt.url
    ckpt.save(step, {"model": model, "optim": optim, "step": step})
    ckpt.wait()
    full = full_state(model, optim)
    if RANK == 0:
        torch.save(full, expected)
    return (Path(directory) / f"step-{step:08d}" / f"__{RANK}_0.distcp").stat().st_size


def scenario_reshard(args: dict[str, Any]) -> dict[str, Any]:
    """4 processes: save on 2 ranks, restore on 4 (2 -> 4), save on 4, restore on 2 (4 -> 2).

    Each phase is a new gloo world over the same processes, so torch is imported once; one
    Checkpointer lives through all of them, as it does through an elastic resize.
    """
    d, out = args["dir"], dict[str, Any]()
    ckpt = Checkpointer(d, keep=None)
    if RANK < 2:
        join(f"{args['store']}-1", 2)
        model, optim, _ = sharded(seed=0)
        train(model, optim, range(3))
        out["saved_on_2"] = save_and_record(ckpt, model, optim, 3, f"{d}-expected-3.pt")
        dist.destroy_process_group()
    join(f"{args['store']}-2", 4)
    out["on_4"] = restore_and_compare(ckpt, 3, f"{d}-expected-3.pt")
    model, optim, state = sharded(seed=1)
    ckpt.restore(state, 3)
    train(model, optim, range(3, 5))
    out["saved_on_4"] = save_and_record(ckpt, model, optim, 5, f"{d}-expected-5.pt")
    dist.destroy_process_group()
    if RANK < 2:
        join(f"{args['store']}-3", 2)
        out["on_2"] = restore_and_compare(ckpt, 5, f"{d}-expected-5.pt")
        dist.destroy_process_group()
    return out


def scenario_ddp_train(args: dict[str, Any]) -> dict[str, Any]:
    """DDP training with async saves in flight while DDP all-reduces; restore and compare."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    hidden = args.get("hidden", 30)
    model = DDP(mlp(0, hidden))
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    ckpt = Checkpointer(args["dir"], keep=2, persist=args.get("persist", "thread"),
                        policy=SavePolicy(every_steps=args["every"]))
    rng = {"gen": torch.Generator().manual_seed(RANK).get_state(), "rank": RANK}
    state: dict[str, Any] = {"model": model, "optim": optim, "step": 0, "rng": RankLocal(rng)}
    saved = []
    for step in range(1, args["steps"] + 1):
        train(model, optim, range(step, step + 1))
        state["step"] = step
        if ckpt.maybe_save(step, state):
            saved.append(step)
    ckpt.wait()
    # Timed saves: rank 0's clock decides for every rank, or the ranks would disagree.
    timed = Checkpointer(f"{args['dir']}-timed", keep=None,
                         policy=SavePolicy(every_seconds=0.05))
    timed_saves = []
    for step in range(1, 9):
        time.sleep(0.02 * (RANK + 1))  # the ranks' clocks drift apart
        if timed.maybe_save(step, {"step": step}):
            timed_saves.append(step)
    timed.close()
    expected: dict[str, Any] = dict(get_model_state_dict(model))
    expected = {k: v.clone() for k, v in expected.items()}
    tensors: list[torch.Tensor] = list(expected.values())
    tensors += [t for s in optim.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    state_bytes = sum(t.numel() * t.element_size() for t in tensors)
    fresh = DDP(mlp(1, hidden))
    fresh_optim = torch.optim.Adam(fresh.parameters(), lr=1e-2)
    back: dict[str, Any] = {"model": fresh, "optim": fresh_optim, "step": None,
                            "rng": RankLocal(None)}
    step = ckpt.restore_latest(back)
    diff = first_difference(get_model_state_dict(fresh), expected)
    ckpt.close()
    return {"saved": saved, "restored": step, "state_step": back["step"], "diff": diff,
            "rng_rank": back["rng"].value["rank"], "steps": ckpt.steps(),
            "state_bytes": state_bytes, "timed_saves": timed_saves,
            "blocked_s": ckpt.last_save.blocked_s if ckpt.last_save else None}


def scenario_integrity(args: dict[str, Any]) -> dict[str, Any]:
    """1. Each rank passes its own directory (an easy mistake): the first save says so.
    2. Save steps 1 and 2 with a per-rank value; rank 0 corrupts rank 1's value in step 2 (only
    rank 1 reads it); every rank must fall back to step 1 together."""
    try:
        Checkpointer(f"{args['dir']}-rank-{RANK}").save(1, {"w": torch.ones(4)}, blocking=True)
        url_error = None
    except Exception as exc:
        url_error = f"{type(exc).__name__}: {exc}"
    model = mlp(0)
    ckpt = Checkpointer(args["dir"], keep=None)
    for step in (1, 2):
        state = {"model": model, "step": step, "mine": RankLocal("x" * 4000 + f"{RANK}/{step}")}
        ckpt.save(step, state, blocking=True)
    dist.barrier()
    if RANK == 0:
        path = Path(args["dir"]) / "step-00000002" / "__1_0.distcp"
        data = bytearray(path.read_bytes())
        at = data.index(b"x" * 100) + 50
        data[at : at + 10] = b"y" * 10
        path.write_bytes(bytes(data))
    dist.barrier()
    back: dict[str, Any] = {"model": mlp(1), "step": -1, "mine": RankLocal(None)}
    restored = Checkpointer(args["dir"]).restore_latest(back)
    return {"url_error": url_error, "restored": restored, "step": back["step"],
            "mine": back["mine"].value[-3:], **_one_rank_cannot_write(f"{args['dir']}-full"),
            **_layouts_agreed(f"{args['dir']}-layouts")}


def _one_rank_cannot_write(url: str) -> dict[str, Any]:
    """3. Rank 1's shard cannot be written (a file size limit: a real EFBIG, as on a full
    disk): every rank's save fails, naming rank 1's error; nothing is committed; the next save
    (the limit lifted) commits."""
    import resource
    import signal

    ckpt = Checkpointer(url, keep=None)
    state = {"step": 1, "mine": RankLocal(torch.zeros(8192))}  # 32 kB per rank
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    if RANK == 1:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (16384, limits[1]))
    try:
        ckpt.save(1, state, blocking=True)
        full_error = None
    except Exception as exc:
        full_error = f"{type(exc).__name__}: {exc}"
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
    failed_steps = ckpt.steps()
    ckpt.save(2, {**state, "step": 2}, blocking=True)
    ckpt.close()
    return {"full_error": full_error, "failed_steps": failed_steps, "later_steps": ckpt.steps()}


def _layouts_agreed(url: str) -> dict[str, Any]:
    """4. Background saves: rank 1 alone changes layout (step 5: every rank plans again and
    saves), both do (step 7: saved), rank 1 cannot prepare (step 8: its own error on rank 1,
    rank 1 named on rank 0; nothing saved)."""
    ckpt = Checkpointer(url, keep=None)
    went: dict[int, object] = {}
    size = 8

    def save(step: int, mine: Any) -> None:
        try:
            went[step] = ckpt.save(step, {"w": torch.ones(4) * step, "mine": RankLocal(mine)})
            ckpt.wait()
        except Exception as exc:
            went[step] = f"{type(exc).__name__}: {exc}"

    for step in range(1, 10):
        if (step == 5 and RANK == 1) or step == 7:
            size += 8
        save(step, torch.sparse_coo_tensor(size=(2,)) if step == 8 and RANK == 1
             else torch.zeros(size))
    ckpt.close()
    return {"layout_steps": ckpt.steps(), "layout_went": went}


def scenario_staging(args: dict[str, Any]) -> dict[str, Any]:
    """Two ranks of one job on one host save to a store without rename (staged, uploaded):
    each must stage in its own directory, or one's cleanup removes the other's shard."""
    from perdure.runtime.checkpoint.persist import rank_staging

    ckpt = Checkpointer(args["url"], keep=2)
    for step in range(1, args["saves"] + 1):
        big = torch.full((1 << 20,), float(step * 10 + RANK))
        ckpt.save(step, {"mine": RankLocal(big), "step": step}, blocking=True)
    ckpt.close()
    assert ckpt.staging_dir is not None
    return {"steps": ckpt.steps(), "staging": str(rank_staging(ckpt.staging_dir, ckpt.url, RANK))}


def scenario_single_writer(args: dict[str, Any]) -> dict[str, Any]:
    """A replicated state of at most SINGLE_WRITER_BYTES (DDP's, nothing per rank) is written
    by rank 0 alone, a larger one by both ranks; each restores on both ranks, and the small one
    on rank 0 alone (a world of one)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(mlp(0))
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    train(model, optim, range(1, 3))
    big = torch.arange(300_000, dtype=torch.float32)  # 1.2 MB, the same on every rank
    out: dict[str, Any] = {}
    for name, state in (("small", {"model": model, "optim": optim, "step": 2}),
                        ("big", {"w": big, "step": 2})):
        ckpt = Checkpointer(f"{args['dir']}/{name}", keep=None)
        ckpt.save(2, state, blocking=True)
        out[f"{name}_files"] = sorted(
            p.name for p in (Path(args["dir"]) / name / "step-00000002").iterdir())
        if name == "small":
            fresh = DDP(mlp(1))
            fresh_optim = torch.optim.Adam(fresh.parameters(), lr=1e-2)
            ckpt.restore_latest({"model": fresh, "optim": fresh_optim, "step": None})
            out["small_diff"] = first_difference(full_state(fresh, fresh_optim),
                                                 full_state(model, optim))
        else:
            back = {"w": torch.zeros(300_000), "step": None}
            ckpt.restore_latest(back)
            out["big_diff"] = None if torch.equal(back["w"], big) else "w differs"
        ckpt.close()
    if RANK == 0:  # the small one again, on a world of one
        alone = mlp(1)
        alone_optim = torch.optim.Adam(alone.parameters(), lr=1e-2)
        ckpt = Checkpointer(f"{args['dir']}/small", alone=True)
        out["alone_step"] = ckpt.restore_latest({"model": alone, "optim": alone_optim,
                                                 "step": None})
        out["alone_diff"] = first_difference(full_state(alone, alone_optim),
                                             full_state(model.module, optim))
    return out


def main() -> None:
    scenario, args = sys.argv[1], json.loads(sys.argv[2])
    if WORLD > 1 and scenario not in PHASED:
        dist.init_process_group("gloo", init_method=f"file://{args['store']}",
                                rank=RANK, world_size=WORLD)
    start = time.perf_counter()
    result = globals()[f"scenario_{scenario}"](args)
    result["seconds"] = time.perf_counter() - start
    result["rank"] = RANK
    Path(args["out"]).with_suffix(f".rank{RANK}.json").write_text(json.dumps(result))
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # a gloo thread can hang interpreter exit (MACHINE-NOTES)


if __name__ == "__main__":
    main()
