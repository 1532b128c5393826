"""Reading why a replica failed: error files in both formats, and tracebacks at stderr's end."""

from __future__ import annotations

import builtins
import json
import sys
import traceback
from pathlib import Path

import pytest

from perdure.runtime.errorfile import parse_traceback, read_error_file, read_stderr_tail


def _printed(exc: BaseException) -> str:
    """What the interpreter prints for an uncaught `exc` (it uses the same formatter)."""
    return "".join(traceback.format_exception(exc))


def _raised(fn: object) -> BaseException:
    try:
        fn()  # type: ignore[operator]
    except BaseException as exc:
        return exc
    raise AssertionError("did not raise")


class ShapeError(Exception):
    pass


def _chained() -> None:
    try:
        {}["missing"]
    except KeyError as err:
        raise ShapeError("expected (4, 8)\ngot (4, 9)") from err


def _during_handling() -> None:
    try:
        print(1 / 0)
    except ZeroDivisionError:
        raise RuntimeError("while recovering") from None


def _with_note() -> None:
    err = ValueError("bad shape")
    err.add_note("in batch 7")
    raise err


@pytest.mark.parametrize(
    ("exc_fn", "expected_type", "expected_message"),
    [
        (lambda: int("x"), "ValueError", "invalid literal for int() with base 10: 'x'"),
        (_chained, "ShapeError", "expected (4, 8)\ngot (4, 9)"),
        (_during_handling, "RuntimeError", "while recovering"),
        (_with_note, "ValueError", "bad shape\nin batch 7"),
        (lambda: (_ for _ in ()).throw(KeyboardInterrupt()), "KeyboardInterrupt", ""),
        (
            lambda: json.loads("{"),
            "JSONDecodeError",
            "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
    ],
    ids=[
        "plain",
        "chained-multiline",
        "context-suppressed",
        "note",
        "keyboard-interrupt",
        "qualified-name",
    ],
)
def test_parse_traceback_takes_the_final_exception(
    exc_fn: object, expected_type: str, expected_message: str
) -> None:
    text = "step 1 loss 0.5\nstep 2 loss 0.4\n" + _printed(_raised(exc_fn))
    error = parse_traceback(text)
    assert error is not None
    assert (error["type"], error["message"]) == (expected_type, expected_message)
    assert error["source"] == "stderr"
    assert error["traceback"].startswith("Traceback (most recent call last):")


def test_a_chained_traceback_keeps_only_the_last_exception() -> None:
    error = parse_traceback(_printed(_raised(_chained)))
    assert error is not None
    assert "KeyError" not in error["traceback"] and "ShapeError" in error["traceback"]


def test_syntax_error_in_the_main_script_has_no_header() -> None:
    exc = _raised(lambda: compile("def f(:\n    pass\n", "/job/train.py", "exec"))
    printed = "".join(traceback.format_exception_only(type(exc), exc))
    assert "Traceback" not in printed
    error = parse_traceback("some output\n" + printed)
    assert error is not None
    assert error["type"] == "SyntaxError"
    assert isinstance(exc, SyntaxError) and error["message"] == exc.msg
    assert 'File "/job/train.py", line 1' in error["traceback"]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception groups are Python 3.11+")
def test_exception_group_reports_the_group() -> None:
    exc = builtins.ExceptionGroup("two ranks failed", [ValueError("x"), TypeError("y")])
    error = parse_traceback(_printed(_raised(lambda: (_ for _ in ()).throw(exc))))
    assert error is not None
    assert (error["type"], error["message"]) == (
        "ExceptionGroup",
        "two ranks failed (2 sub-exceptions)",
    )


def test_torch_exit_noise_after_the_traceback_is_not_the_message() -> None:
    text = _printed(_raised(lambda: int("x"))) + (
        "[rank0]:[W1130 04:12:33.123456 ProcessGroupNCCL.cpp:1250] Warning: "
        "destroy_process_group() was not called\n"
    )
    error = parse_traceback(text)
    assert error is not None
    assert error["message"] == "invalid literal for int() with base 10: 'x'"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "loss 0.1\ndone\n",
        "Killed\n",
        'Traceback (most recent call last):\n  File "x", line 1\n',
    ],
)
def test_no_traceback_means_no_error(text: str) -> None:
    assert parse_traceback(text) is None


def test_read_stderr_tail_starts_at_this_launch_and_drops_a_cut_line(tmp_path: Path) -> None:
    log = tmp_path / "worker.err"
    log.write_text("old launch\nValueError: old\n=== new ===\n" + "x" * 100 + "\nend\n")
    start = len("old launch\nValueError: old\n")
    assert read_stderr_tail(log, start) == "=== new ===\n" + "x" * 100 + "\nend\n"
    assert read_stderr_tail(log, start, limit=50) == "end\n"
    assert read_stderr_tail(tmp_path / "missing.err") == ""


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "error.json"
    path.write_text(json.dumps(data))
    return path


def test_read_error_file_perdure_format(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        {
            "type": "ValueError",
            "message": "bad shape",
            "traceback": "Traceback ...",
            "time": 1.0,
            "rank": 3,
            "pid": 42,
        },
    )
    assert read_error_file(path) == {
        "type": "ValueError",
        "message": "bad shape",
        "traceback": "Traceback ...",
        "source": "error_file",
    }


def test_read_error_file_torchelastic_record_format(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        {
            "message": {
                "message": "DistBackendError: NCCL error\nlast error: timeout",
                "extraInfo": {
                    "py_callstack": "Traceback (most recent call last): ...",
                    "timestamp": "1700000000",
                },
            }
        },
    )
    error = read_error_file(path)
    assert error is not None
    assert (error["type"], error["message"]) == (
        "DistBackendError",
        "NCCL error\nlast error: timeout",
    )
    assert error["traceback"].startswith("Traceback")


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("ValueError: bad shape", ("ValueError", "bad shape")),
        ("c10::Error at ProcessGroup.cpp:123", ("Error", "c10::Error at ProcessGroup.cpp:123")),
    ],
)
def test_read_error_file_torchelastic_string_format(
    tmp_path: Path, message: str, expected: tuple[str, str]
) -> None:
    error = read_error_file(_write(tmp_path, {"message": message, "errorCode": 1}))
    assert error is not None and (error["type"], error["message"]) == expected


@pytest.mark.parametrize("content", ["", "{not json", "[1, 2]", "{}", '{"message": ""}'])
def test_unusable_error_files_read_as_none(tmp_path: Path, content: str) -> None:
    path = tmp_path / "error.json"
    path.write_text(content)
    assert read_error_file(path) is None
    assert read_error_file(tmp_path / "missing.json") is None


def test_huge_messages_are_clipped(tmp_path: Path) -> None:
    error = read_error_file(_write(tmp_path, {"type": "RuntimeError", "message": "x" * 100_000}))
    assert error is not None and len(error["message"]) <= 4096
    assert error["message"].startswith("x" * 1000) and "characters clipped" in error["message"]
