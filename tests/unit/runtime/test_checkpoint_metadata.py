"""DCP metadata survives the JSON round trip a restore relies on (no pickle involved)."""

from __future__ import annotations

import json

import torch
from torch.distributed.checkpoint.default_planner import (
    create_default_global_save_plan,
    create_default_local_save_plan,
)

from perdure.runtime import compat
from perdure.runtime.checkpoint.metadata import decode_metadata, encode_metadata
from perdure.runtime.checkpoint.tree import flatten


def test_metadata_json_round_trip() -> None:
    flat, paths = flatten({"model": {"w": torch.ones(3, 2, dtype=torch.bfloat16)},
                           "step": 4, "loader": {7: "x"}})
    plans, md = create_default_global_save_plan([create_default_local_save_plan(flat, True)])
    items = plans[0].items
    md.storage_data = {i.index: compat.storage_info("a", 100 * n, 50) for n, i in enumerate(items)}
    back, back_paths = decode_metadata(json.loads(json.dumps(encode_metadata(md, paths))))
    assert back.state_dict_metadata == md.state_dict_metadata
    assert back.storage_data == md.storage_data
    assert back_paths == paths
    assert back.planner_data == {"model.w": ("model", "w"), "step": ("step",),
                                 "loader.7": ("loader", "7")}
