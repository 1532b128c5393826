"""perdure.runtime: what a training script imports.

Never imports the control plane (controller, backends, store, api, cli). Names are loaded on
first use so that `import perdure.runtime` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Checkpointer": "perdure.runtime.checkpoint",
    "SavePolicy": "perdure.runtime.checkpoint",
    "RankLocal": "perdure.runtime.checkpoint",
    "folders": "perdure.runtime.checkpoint.folders",
    "ElasticSampler": "perdure.runtime.data",
    "ElasticLoader": "perdure.runtime.data",
    "ShardDataset": "perdure.runtime.data",
    "CachedVolume": "perdure.runtime.data",
    "seed_everything": "perdure.runtime.rng",
    "rng_state": "perdure.runtime.rng",
    "set_rng_state": "perdure.runtime.rng",
    "record": "perdure.runtime.errors",
    "elastic": "perdure.runtime.elastic",
    "Snapshotter": "perdure.runtime.elastic",
    "goodput": "perdure.runtime.goodput",
    "init": "perdure.runtime.context",
    "Context": "perdure.runtime.context",
    "StopVote": "perdure.runtime.vote",
    "resume": "perdure.runtime.resume",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'perdure.runtime' has no attribute {name!r}")
    if module.rsplit(".", 1)[-1] == name:  # a submodule: `from perdure.runtime import elastic`
        return importlib.import_module(module)
    return getattr(importlib.import_module(module), name)
