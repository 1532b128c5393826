"""Read why a replica failed: its error file (perdure's or torchelastic's) or its stderr traceback.

Only the standard library (the supervisor imports it). Every reader returns
`{"type", "message", "traceback", "source"}` (source "error_file" or "stderr"), or None.
"""

from __future__ import annotations

import contextlib
import json
import os
import re

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing and pathlib cost the supervisor start-up time; annotations only
    from collections.abc import Iterator
    from typing import Any

    PathLike = str | os.PathLike[str]

# Small enough for an event log (a DistBackendError can carry a whole C++ stack).
MAX_MESSAGE_CHARS = 4096
MAX_TRACEBACK_CHARS = 64 * 1024
# Past this, a file someone else wrote (unclipped) gives its type and message start only.
MAX_READ_BYTES = 16 * 1024 * 1024

_HEADER = "Traceback (most recent call last):"
_GROUP_HEADER = "Exception Group Traceback (most recent call last):"
# `pkg.mod.Name: message`, or a bare `KeyboardInterrupt`.
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?:: (.*)|:)?$")
# A `File "...", line N` frame; SyntaxErrors in the main script print one with no header.
_FRAME_LINE = re.compile(r'^\s+File ".*", line \d+')
_SYNTAX_TYPES = ("SyntaxError", "IndentationError", "TabError")
# Lines that end an exception message: torch's glog lines, shutdown noise, warnings.
_NOISE = re.compile(r"^(\[rank\d+\]:)?\[?[WEIF]\d{4} |^Exception ignored in|^\S+:\d+: \w*Warning: ")


def split_exception_line(line: str) -> tuple[str, str] | None:
    """Split `pkg.ValueError: bad shape` into ("ValueError", "bad shape"); None if not one."""
    match = _EXC_LINE.match(line.rstrip())
    if match is None:
        return None
    return match.group(1).rsplit(".", 1)[-1], match.group(2) or ""


def _error(type_: str, message: str, traceback: str, source: str) -> dict[str, str]:
    return {
        "type": type_[:200],
        "message": clip(message, MAX_MESSAGE_CHARS),
        "traceback": clip(traceback, MAX_TRACEBACK_CHARS),
        "source": source,
    }


def clip(text: str, limit: int) -> str:
    """`text` in at most `limit` characters: its head and tail, with what was cut counted."""
    if len(text) <= limit:
        return text
    marker = " …[{} characters clipped]… "
    room = max(limit - len(marker.format(len(text))), 2)
    cut = marker.format(len(text) - room)
    return text[: room - room // 2] + cut + text[len(text) - room // 2 :]


def read_error_file(path: PathLike) -> dict[str, str] | None:
    """Read the error file a replica wrote (perdure's format or torchelastic's); None when it
    is missing, empty or unreadable."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_READ_BYTES + 1)
    except OSError:
        return None
    text = raw.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        return _salvage(text) if len(raw) > MAX_READ_BYTES else None
    return parse_error_payload(data)


_TYPE_FIELD = re.compile(r'"type"\s*:\s*"([A-Za-z_][\w.]{0,199})"')
_MESSAGE_FIELD = re.compile(r'"message"\s*:\s*"((?:[^"\\]|\\.){0,' + str(MAX_MESSAGE_CHARS) + "})")


def _salvage(head: str) -> dict[str, str] | None:
    """The type and the start of the message of an error file too large to read whole."""
    found = _TYPE_FIELD.search(head)
    if found is None:
        return None
    message = _MESSAGE_FIELD.search(head)
    start = message.group(1) if message else ""
    with contextlib.suppress(ValueError):
        start = json.loads(f'"{start.removesuffix(chr(92))}"')
    return _error(found.group(1).rsplit(".", 1)[-1],
                  f"{start} …[the error file is over {MAX_READ_BYTES} bytes: the rest is not "
                  "read]", "", "error_file")


def parse_error_payload(data: Any) -> dict[str, str] | None:
    """Turn an error file's decoded JSON into an error dict; None for an unknown shape."""
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("type"), str) and data["type"]:
        return _error(
            data["type"].rsplit(".", 1)[-1],
            _as_text(data.get("message")),
            _as_text(data.get("traceback")),
            "error_file",
        )
    message = data.get("message")
    if isinstance(message, dict):  # torchelastic's @record
        extra = message.get("extraInfo")
        callstack = _as_text(extra.get("py_callstack")) if isinstance(extra, dict) else ""
        return _from_summary(_as_text(message.get("message")), callstack)
    if isinstance(message, str) and message:  # torchelastic's newer / C++ shape
        return _from_summary(message, "")
    return None


def _from_summary(summary: str, traceback: str) -> dict[str, str] | None:
    if not summary and not traceback:
        return None
    first, _, rest = summary.partition("\n")
    parts = split_exception_line(first)
    if parts is None:
        return _error("Error", summary, traceback, "error_file")
    type_, message = parts
    return _error(type_, message + ("\n" + rest if rest else ""), traceback, "error_file")


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def read_stderr_tail(path: PathLike, start: int = 0, limit: int = 64 * 1024) -> str:
    """Read at most the last `limit` bytes of a log file, never before byte `start`."""
    try:
        with open(path, "rb") as f:
            end = f.seek(0, 2)
            begin = max(start, end - limit)
            f.seek(begin)
            data = f.read(end - begin)
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    if begin > start:  # cut mid-line: drop the partial first line
        text = text.partition("\n")[2]
    return text


def last_lines(text: str, lines: int = 3, width: int = 240) -> str:
    """The last `lines` non-blank lines of `text`, each cut to `width`, joined by " | "."""
    kept = [x.strip() for x in text.splitlines() if x.strip()][-lines:]
    return " | ".join(x if len(x) <= width else x[:width - 3] + "..." for x in kept)


def parse_traceback(stderr_tail: str) -> dict[str, str] | None:
    """The last uncaught exception in the end of a replica's stderr; None if there is none.

    Lines may carry a launcher's prefix (`[rank0]: `, timestamps): the traceback is read from
    the lines of its header's stream, the prefix taken off.
    """
    lines = stderr_tail.splitlines()
    found = None
    for index, group, tag in _headers(lines):
        body = _own_lines(lines[index + 1 :], tag)
        if group:
            # An exception group prints each line of the outer traceback as `  | <line>`.
            body = [line[4:] if line.startswith("  | ") else line for line in body]
        found = _parse_body(split_prefix(lines[index])[2], body) or found
        # torchrun's ChildFailedError says "see above": the worker's traceback names it.
        if found is None or found["type"] not in _LAUNCHER_TYPES:
            break
    return found or _parse_syntax_error(lines)


_LAUNCHER_TYPES = ("ChildFailedError",)


# What torch and launchers put before a line: log levels and timestamps; tags that hold a
# number and no space (`[rank0]:`, torchrun's `[default0]:`), Ray's `(pid=123)`.
_STAMP = (r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\b:?"
          r"|\[?\d{4}-\d\d-\d\d[T _]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?:?"
          r"|\[?\d\d:\d\d:\d\d(?:[.,]\d+)?\]?:?")
_TAG = r"\[[\w.|/:-]*\d[\w.|/:-]*\]:?|\([^()]*pid=\d+[^()]*\)"
_PREFIX = re.compile(rf"(?:(?:{_STAMP})\s?|(?:{_TAG})\s?)+")
_STAMP_ONLY = re.compile(rf"(?:{_STAMP})\s?")


def split_prefix(line: str) -> tuple[str, str, str]:
    """(prefix, tag, rest): what a launcher put before `rest` and the stream tag in it."""
    match = _PREFIX.match(line)
    if match is None:
        return "", "", line
    prefix = match.group(0)
    return prefix, _STAMP_ONLY.sub("", prefix).strip(), line[len(prefix) :]


def _own_lines(lines: list[str], tag: str | None) -> list[str]:
    """The lines after a header that belong to its stream (all when `tag` is None), unprefixed."""
    if tag is None:
        return lines
    out = []
    for line in lines:
        prefix, line_tag, rest = split_prefix(line)
        if prefix and line_tag == tag:
            out.append(rest)
        elif not prefix and not tag:  # a timestamped header followed by a bare line
            out.append(line)
    return out


def _headers(lines: list[str]) -> Iterator[tuple[int, bool, str | None]]:
    """Traceback headers, last first: (index, is a group, its stream's tag or None)."""
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index].rstrip()
        if not line.endswith(_HEADER):
            continue
        prefix, tag, rest = split_prefix(line)
        if rest == _HEADER:
            yield index, False, tag if prefix else None
        elif rest.endswith(_GROUP_HEADER) and rest.lstrip(" +") == _GROUP_HEADER:
            yield index, True, tag if prefix else None


def _parse_body(header: str, body: list[str]) -> dict[str, str] | None:
    for offset, line in enumerate(body):
        if not line or line[0] in " \t":  # frames and source lines are indented
            continue
        parts = split_exception_line(line)
        if parts is None:
            return None
        message_lines = _message_lines(parts[1], body[offset + 1 :])
        frames = [header.strip(), *body[:offset], line, *message_lines[1:]]
        return _error(parts[0], _worker_message(message_lines), "\n".join(frames), "stderr")
    return None


_ORIGINAL = "Original Traceback (most recent call last):"


def _worker_message(lines: list[str]) -> str:
    """A re-raised DataLoader worker's exception: its first line and the worker's message."""
    if _ORIGINAL not in lines:
        return "\n".join(lines)
    worker = lines[lines.index(_ORIGINAL) + 1 :]
    # The worker's own final exception line (frames and source lines are indented).
    last = next((i for i in range(len(worker) - 1, -1, -1)
                 if worker[i][:1] not in ("", " ", "\t") and split_exception_line(worker[i])),
                None)
    if last is None:
        return "\n".join(lines)
    parts = split_exception_line(worker[last])
    assert parts is not None
    message = "\n".join([parts[1], *worker[last + 1 :]]).strip()
    return f"{lines[0].rstrip('.')}: {message}" if message else lines[0]


def _message_lines(first: str, rest: list[str]) -> list[str]:
    """The exception message: its first line plus the lines that continue it (notes too)."""
    lines = [first]
    for line in rest:
        if _NOISE.match(line) or line.startswith(("  +-", "    +-")):
            break
        lines.append(line)
    while len(lines) > 1 and not lines[-1].strip():
        lines.pop()
    return lines


def _parse_syntax_error(lines: list[str]) -> dict[str, str] | None:
    for index in range(len(lines) - 1, -1, -1):
        parts = split_exception_line(lines[index])
        if parts is None or parts[0] not in _SYNTAX_TYPES:
            continue
        start = next(
            (i for i in range(index - 1, max(index - 6, -1), -1) if _FRAME_LINE.match(lines[i])),
            None,
        )
        if start is None:
            continue
        message = _message_lines(parts[1], lines[index + 1 :])
        frames = [*lines[start:index], lines[index], *message[1:]]
        return _error(parts[0], "\n".join(message), "\n".join(frames), "stderr")
    return None
