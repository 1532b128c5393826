"""The stderr traceback parser reads through what torch and launchers put before each line."""

from __future__ import annotations

import pytest

from perdure.runtime.errorfile import parse_traceback, split_prefix

TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/job/train.py", line 30, in <module>',
    "    raise ValueError(\"bad shape\")",
    "ValueError: bad shape",
]


def prefixed(prefix: str, lines: list[str] = TRACEBACK) -> str:
    return "\n".join(prefix + line for line in lines)


@pytest.mark.parametrize("prefix", [
    "[rank0]: ",  # torch after init_process_group
    "[rank13]:",
    "[default0]:",  # torchrun --tee / --log-line-prefix-template
    "[default3]: ",
    "[trainer1|1]:",  # torchrun --log-line-prefix-template "[{role_name}{rank}|{local_rank}]:"
    "2026-12-01 15:10:48,724 ",  # logging's asctime
    "2026-12-01T15:10:48.724+00:00 [rank1]: ",  # a collector's timestamp, then torch's tag
    "[15:10:48.724] [default1]:[rank1]: ",
    "(pid=4242) ",  # Ray's worker prefix
    "(RayTrainWorker pid=4242, ip=10.0.0.2) [rank0]: ",
])
def test_the_exception_is_found_through_a_prefix(prefix: str) -> None:
    err = parse_traceback(prefixed(prefix) + "\n")
    assert err is not None, prefix
    assert (err["type"], err["message"]) == ("ValueError", "bad shape")
    assert err["traceback"].splitlines()[0] == "Traceback (most recent call last):"


def test_timestamps_that_change_from_line_to_line_are_one_stream() -> None:
    text = "\n".join(f"2026-12-01 15:10:4{i},72{i} [rank0]: {line}"
                     for i, line in enumerate(TRACEBACK))
    err = parse_traceback(text)
    assert err is not None and err["message"] == "bad shape"


def test_two_ranks_interleaved_each_keep_their_own_lines() -> None:
    other = ["Traceback (most recent call last):", '  File "/job/train.py", line 9, in <module>',
             "KeyError: 'other rank'"]
    lines = []
    for mine, theirs in zip([*TRACEBACK, ""], [*other, "", ""], strict=False):
        lines += [f"[rank1]: {theirs}", f"[rank0]: {mine}"]
    lines.insert(2, "[rank0]: Traceback (most recent call last):")  # rank0's is the last header
    err = parse_traceback("\n".join(lines[2:]))
    assert err is not None and (err["type"], err["message"]) == ("ValueError", "bad shape")


def test_glog_lines_torch_prints_at_exit_end_the_message() -> None:
    text = prefixed("[rank0]: ") + (
        "\n[rank0]:[W1201 15:10:48.724000 6784 ProcessGroupGloo.cpp:10] Warning: destroyed"
        "\nW1201 15:10:48.724000 6784 torch/distributed/elastic/api.py:1028] closing")
    err = parse_traceback(text)
    assert err is not None and err["message"] == "bad shape"


def test_torchrun_as_the_command_reports_the_workers_exception() -> None:
    agent = ["Traceback (most recent call last):", '  File "torch/distributed/run.py", line 9',
             "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
             "=====", "train.py FAILED"]
    err = parse_traceback(prefixed("[rank0]: ") + "\nE1201 failed (exitcode: 1)\n"
                          + "\n".join(agent))
    assert err is not None and (err["type"], err["message"]) == ("ValueError", "bad shape")


def test_a_dataloader_workers_exception_names_the_workers_message() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "/job/train.py", line 9, in <module>',
        "    for batch in loader:",
        "KeyError: Caught KeyError in DataLoader worker process 1.",
        "Original Traceback (most recent call last):",
        '  File "torch/utils/data/_utils/worker.py", line 374, in _worker_loop',
        "    data = fetcher.fetch(index)",
        "KeyError: 'sample 3 is corrupt'",
        "",
    ]
    err = parse_traceback(prefixed("[rank0]: ", lines))
    assert err is not None and err["type"] == "KeyError"
    assert err["message"] == "Caught KeyError in DataLoader worker process 1: 'sample 3 is corrupt'"
    assert "worker.py" in err["traceback"]


def test_a_message_line_that_looks_like_a_prefix_is_kept_without_one() -> None:
    # No prefix on the header: lines are read exactly as printed.
    err = parse_traceback("Traceback (most recent call last):\n  File \"x\", line 1\n"
                          "ValueError: shapes differ\n[3]: left\n[4]: right\n")
    assert err is not None and err["message"] == "shapes differ\n[3]: left\n[4]: right"


def test_split_prefix_names_the_stream_without_its_timestamps() -> None:
    assert split_prefix("12:00:01 [rank2]: x") == ("12:00:01 [rank2]: ", "[rank2]:", "x")
    assert split_prefix("plain line") == ("", "", "plain line")
