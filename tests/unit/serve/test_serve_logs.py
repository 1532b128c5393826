"""Reading logs by offsets: tails start at a line, text never ends inside a character."""

from __future__ import annotations

from pathlib import Path

from perdure.serve.logs import CHUNK, read_chunk


def test_tail_of_a_large_log_is_one_bounded_read_from_a_line(tmp_path: Path) -> None:
    log = tmp_path / "w.err"
    lines = [f"line {i:07d} " + "x" * 80 for i in range(120_000)]  # ~11 MB
    log.write_text("\n".join(lines) + "\n")
    size = log.stat().st_size
    tail = read_chunk(log, None)
    assert tail.size == size and tail.next_offset == size
    assert size - tail.offset <= CHUNK and tail.text.startswith("line ")
    assert tail.text.endswith(lines[-1] + "\n")
    before = read_chunk(log, tail.offset - 1000, 1000)
    assert before.next_offset == tail.offset  # "load earlier" joins up exactly
    assert read_chunk(log, -10).offset == size - 10


def test_text_never_ends_inside_a_utf8_character(tmp_path: Path) -> None:
    log = tmp_path / "w.out"
    greek = "\u03b1\u03b2\u03b3"  # 2 bytes each
    log.write_bytes(greek.encode())
    c = read_chunk(log, 0, 3)
    assert c.text == greek[0] and c.next_offset == 2
    rest = read_chunk(log, c.next_offset)
    assert rest.text == greek[1:] and rest.next_offset == 6
    log.write_bytes("a€".encode()[:-1])  # a writer is half-way through '€'
    c = read_chunk(log, 0)
    assert c.text == "a" and c.next_offset == 1 and c.size == 3


def test_missing_log_and_offsets_past_the_end(tmp_path: Path) -> None:
    c = read_chunk(tmp_path / "nope.err", 0)
    assert not c.exists and c.size == 0 and c.text == ""
    log = tmp_path / "w.err"
    log.write_text("hello\n")
    assert read_chunk(log, 10**12).text == ""
    assert read_chunk(log, -(10**12)).text == "hello\n"
