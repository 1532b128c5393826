"""Writing the error file: `record` and the excepthooks, read back by the supervisor's reader."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from perdure.runtime import errors
from perdure.runtime.errorfile import read_error_file
from perdure.runtime.errors import install_excepthook, record, write_error_file


@pytest.fixture
def error_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "error.json"
    monkeypatch.setenv("PERDURE_ERROR_FILE", str(path))
    monkeypatch.setenv("RANK", "3")
    return path


def test_record_writes_the_error_file_and_reraises(error_file: Path) -> None:
    @record
    def train(steps: int) -> int:
        raise ValueError(f"bad shape after {steps} steps")

    with pytest.raises(ValueError, match="bad shape after 7 steps"):
        train(7)
    data = json.loads(error_file.read_text())
    assert data["type"] == "ValueError" and data["message"] == "bad shape after 7 steps"
    assert "in train" in data["traceback"] and data["traceback"].startswith("Traceback")
    assert (data["rank"], data["pid"]) == (3, os.getpid()) and data["time"] > 0
    assert read_error_file(error_file) == {
        "type": "ValueError",
        "message": "bad shape after 7 steps",
        "traceback": data["traceback"],
        "source": "error_file",
    }
    assert not list(error_file.parent.glob(".error.json.*"))  # no temporary file left


def test_record_passes_results_and_exits_through(error_file: Path) -> None:
    assert record(lambda x: x + 1)(1) == 2

    @record
    def leave() -> None:
        sys.exit(3)

    with pytest.raises(SystemExit):
        leave()
    assert not error_file.exists()


def test_record_without_an_error_file_only_reraises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PERDURE_ERROR_FILE", raising=False)
    with pytest.raises(KeyError):
        record(lambda: {}["k"])()


def test_an_unwritable_error_file_does_not_hide_the_exception(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert write_error_file(RuntimeError("x"), tmp_path / "no-such-dir" / "error.json") is None
    assert "could not write the error file" in capsys.readouterr().err


@pytest.fixture
def fresh_hooks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Stand-in previous hooks that record their calls; the real hooks come back afterwards."""
    calls: list[str] = []
    monkeypatch.setattr(sys, "excepthook", lambda *a: calls.append(f"sys:{a[0].__name__}"))
    monkeypatch.setattr(
        threading, "excepthook", lambda a: calls.append(f"thread:{a.exc_type.__name__}")
    )
    monkeypatch.setattr(errors, "_hook_installed", False)
    yield calls


def test_excepthook_writes_and_chains(error_file: Path, fresh_hooks: list[str]) -> None:
    install_excepthook()
    install_excepthook()  # idempotent: one write, one chained call
    try:
        raise TypeError("wrong dtype")
    except TypeError as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    assert fresh_hooks == ["sys:TypeError"]
    assert json.loads(error_file.read_text())["message"] == "wrong dtype"


def test_thread_exceptions_are_written_too(error_file: Path, fresh_hooks: list[str]) -> None:
    install_excepthook()

    def loader() -> None:
        raise OSError("shard 12 unreadable")

    thread = threading.Thread(target=loader)
    thread.start()
    thread.join()
    assert fresh_hooks == ["thread:OSError"]
    assert json.loads(error_file.read_text())["type"] == "OSError"


def test_an_exception_seen_by_record_and_the_hook_is_written_once(
    error_file: Path, fresh_hooks: list[str]
) -> None:
    install_excepthook()
    with pytest.raises(ValueError) as info:
        record(lambda: int("x"))()
    error_file.unlink()
    sys.excepthook(ValueError, info.value, info.value.__traceback__)
    assert not error_file.exists() and fresh_hooks == ["sys:ValueError"]


def test_an_exception_that_cannot_be_printed_does_not_break_recording(
    error_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    with pytest.raises(Unprintable):
        record(lambda: (_ for _ in ()).throw(Unprintable()))()
    assert not error_file.exists()
    assert "could not write the error file" in capsys.readouterr().err


def test_a_huge_message_is_clipped_on_write_and_the_file_is_private(error_file: Path) -> None:
    huge = "head-" + "x" * 5_000_000 + "-tail"
    try:
        raise ValueError(huge)
    except ValueError as exc:
        assert write_error_file(exc) == error_file
    assert error_file.stat().st_size < 200_000
    assert error_file.stat().st_mode & 0o777 == 0o600
    written = json.loads(error_file.read_text())
    assert written["message"].startswith("head-") and written["message"].endswith("-tail")
    assert "characters clipped" in written["traceback"]
    assert written["traceback"].startswith("Traceback (most recent call last):")
    back = read_error_file(error_file)
    assert back is not None and back["type"] == "ValueError"
    assert back["message"].startswith("head-") and back["message"].endswith("-tail")


def test_a_valid_but_large_file_is_read_not_ignored(tmp_path: Path) -> None:
    """torchelastic's @record (and older perdure) write messages unclipped."""
    path = tmp_path / "error.json"
    path.write_text(json.dumps({"type": "ValueError", "message": "m" * 3_000_000,
                                "traceback": "Traceback...\n" + "t" * 3_000_000}))
    back = read_error_file(path)
    assert back is not None and back["type"] == "ValueError" and len(back["message"]) <= 4096
    path.write_text(json.dumps({"type": "KeyError", "message": "k" * 20_000_000}))
    back = read_error_file(path)  # past what is read whole: the type and the message's start
    assert back is not None and back["type"] == "KeyError"
    assert back["message"].startswith("kkkk") and "not read" in back["message"]
