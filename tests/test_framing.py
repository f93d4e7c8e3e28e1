"""NDJSON and SSE splitters: chunk boundaries, line endings, long lines, SSE field rules."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ollama_tap.framing import LineSplitter, SseEvent, SseSplitter


def pieces_of(stream: bytes, cuts: list[int]) -> list[bytes]:
    """`stream` cut at the given offsets (any order, duplicates allowed)."""
    bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


def split_lines(pieces: list[bytes]) -> list[bytes]:
    splitter = LineSplitter()
    lines = [line for piece in pieces for line in splitter.feed(piece)]
    tail = splitter.flush()
    return [*lines, tail] if tail is not None else lines


def split_events(pieces: list[bytes]) -> list[SseEvent]:
    splitter = SseSplitter()
    events = [event for piece in pieces for event in splitter.feed(piece)]
    return [*events, *splitter.flush()]


# Text lines exercise multi-byte UTF-8; a "\r" inside a line is content, not an ending.
printable = st.characters(codec="utf-8", exclude_characters="\n\r")
line_text = st.text(alphabet=printable, max_size=40)
line_bytes = line_text.map(str.encode)
endings = st.sampled_from([b"\n", b"\r\n"])
cuts = st.lists(st.integers(min_value=0, max_value=10_000), max_size=30)


@given(st.lists(st.tuples(line_bytes, endings), max_size=20), cuts)
def test_lines_do_not_depend_on_piece_boundaries(
    lines: list[tuple[bytes, bytes]], at: list[int]
) -> None:
    stream = b"".join(line + end for line, end in lines)
    assert split_lines(pieces_of(stream, at)) == [line for line, _ in lines]


@given(st.binary(max_size=300), cuts)
def test_arbitrary_bytes_split_the_same_in_any_pieces(stream: bytes, at: list[int]) -> None:
    assert split_lines(pieces_of(stream, at)) == split_lines([stream])


def test_crlf_split_between_cr_and_lf() -> None:
    assert split_lines([b'{"a":1}\r', b'\n{"b":2}\r', b"\n"]) == [b'{"a":1}', b'{"b":2}']


def test_only_the_cr_before_the_newline_is_dropped_wherever_pieces_end() -> None:
    stream = b"a\r\r\n\r\nb\rc\r\n"
    for cut in range(len(stream) + 1):
        assert split_lines([stream[:cut], stream[cut:]]) == [b"a\r", b"", b"b\rc"]


def test_multibyte_utf8_split_inside_a_character() -> None:
    data = '{"response":"日本語 🦙"}\n'.encode()
    for cut in range(1, len(data)):
        assert split_lines([data[:cut], data[cut:]]) == [data[:-1]]


def test_tail_without_newline_comes_out_at_flush() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b'{"a":1}\n{"done":true}') == [b'{"a":1}']
    assert splitter.flush() == b'{"done":true}'
    assert splitter.flush() is None


def test_flush_of_nothing_or_a_lone_cr_is_none() -> None:
    assert LineSplitter().flush() is None
    splitter = LineSplitter()
    splitter.feed(b"x\n\r")
    assert splitter.flush() is None


def test_empty_lines_are_kept_for_the_reader_to_skip() -> None:
    assert split_lines([b"\n\r\na\n"]) == [b"", b"", b"a"]


class CountingBytes(bytes):
    """Bytes that record how many bytes each `find` could have examined."""

    scanned = 0

    def find(self, sub: bytes, start: int = 0, *args: int) -> int:  # type: ignore[override]
        CountingBytes.scanned += len(self) - start
        return super().find(sub, start, *args)


def test_long_line_in_small_pieces_is_scanned_once() -> None:
    line = b'{"response":"' + b"x" * (5 * 1024 * 1024) + b'"}'
    stream = line + b"\n"
    piece = 64 * 1024
    CountingBytes.scanned = 0
    splitter = LineSplitter()
    out: list[bytes] = []
    for i in range(0, len(stream), piece):
        out += splitter.feed(CountingBytes(stream[i : i + piece]))
    assert out == [line]
    assert splitter.flush() is None
    # Linear: each byte is examined at most once, never the carried tail again.
    assert CountingBytes.scanned <= len(stream)


sse_value = st.text(alphabet=printable, max_size=20)


@st.composite
def sse_streams(draw: st.DrawFn) -> tuple[bytes, list[tuple[str | None, bytes]]]:
    """A stream of events with comments, optional `event:` and 1-3 data lines, mixed endings."""
    parts: list[bytes] = []
    expected: list[tuple[str | None, bytes]] = []
    for _ in range(draw(st.integers(0, 6))):
        end = draw(endings)
        if draw(st.booleans()):
            parts.append(b": keep-alive" + end)
        name = draw(st.none() | sse_value.filter(lambda v: not v.startswith(" ")))
        if name is not None:
            parts.append(b"event: " + name.encode() + end)
        values = draw(st.lists(sse_value, min_size=1, max_size=3))
        for value in values:
            space = draw(st.sampled_from([b"", b" "]))
            if not space and value.startswith(" "):
                space = b" "
            parts.append(b"data:" + space + value.encode() + end)
        parts.append(draw(endings))
        expected.append((name, "\n".join(values).encode()))
    return b"".join(parts), expected


@given(sse_streams(), cuts)
def test_sse_events_do_not_depend_on_piece_boundaries(
    case: tuple[bytes, list[tuple[str | None, bytes]]], at: list[int]
) -> None:
    stream, expected = case
    events = split_events(pieces_of(stream, at))
    assert [(e.event, e.data) for e in events] == expected
    assert events == split_events([stream])
    assert sum(e.nbytes for e in events) == len(stream)


def test_sse_fields() -> None:
    stream = (
        b": comment\n"
        b"event: response.output_text.delta\n"
        b"id: 7\n"
        b"retry: 100\n"
        b"data:no-space\n"
        b"data:  two spaces\n"
        b"data\n"
        b"\n"
    )
    [event] = split_events([stream])
    assert event.event == "response.output_text.delta"
    assert event.data == b"no-space\n two spaces\n"
    assert event.nbytes == len(stream)


def test_sse_crlf_and_mixed_endings() -> None:
    stream = b'data: {"a":1}\r\n\r\ndata: {"b":2}\n\r\ndata: [DONE]\r\n\n'
    assert [e.data for e in split_events([stream])] == [b'{"a":1}', b'{"b":2}', b"[DONE]"]


def test_sse_block_without_data_is_not_dispatched() -> None:
    stream = b"event: ping\n\n: only a comment\n\n\n\ndata: x\n\n"
    events = split_events([stream])
    assert [(e.event, e.data) for e in events] == [(None, b"x")]
    assert events[0].nbytes == len(b"data: x\n\n")


def test_sse_event_type_does_not_leak_into_the_next_event() -> None:
    events = split_events([b"event: a\ndata: 1\n\ndata: 2\n\n"])
    assert [e.event for e in events] == ["a", None]


def test_sse_pending_event_is_dispatched_at_eof() -> None:
    splitter = SseSplitter()
    block = b"event: message_stop\ndata: {}\n"
    assert splitter.feed(block) == []
    assert splitter.flush() == [SseEvent(event="message_stop", data=b"{}", nbytes=len(block))]
    assert splitter.flush() == []


def test_sse_unterminated_last_line_at_eof() -> None:
    [event] = split_events([b"data: [DONE]"])
    assert event.data == b"[DONE]"
    assert event.nbytes == len(b"data: [DONE]")


# -- a line past the limit: given up on, never held whole ------------------------------------

LIMIT = 100


@given(st.lists(st.integers(min_value=0, max_value=3 * LIMIT), max_size=12), cuts)
def test_a_line_past_the_limit_is_skipped_whole_and_nothing_else_is(
    lengths: list[int], at: list[int]
) -> None:
    """Every line up to the limit comes out whatever the pieces; a longer one either comes
    out (it arrived whole in one piece, so it was never held) or is counted as skipped,
    and the bytes held between pieces never pass the limit."""
    lines = [b"%d:" % i + b"x" * n for i, n in enumerate(lengths)]
    splitter = LineSplitter(LIMIT)
    out: list[bytes] = []
    for piece in pieces_of(b"".join(line + b"\n" for line in lines), at):
        out += splitter.feed(piece)
        assert len(splitter._tail) <= LIMIT
    assert splitter.flush() is None
    assert [line for line in lines if len(line) <= LIMIT] == [o for o in out if len(o) <= LIMIT]
    assert set(out) <= set(lines)
    assert len(out) + splitter.skipped == len(lines)


def test_the_line_after_a_skipped_one_is_read_from_its_start() -> None:
    splitter = LineSplitter(LIMIT)
    assert splitter.feed(b'{"a":1}\n' + b"x" * 60) == [b'{"a":1}']
    assert splitter.feed(b"x" * 60) == [] and splitter.skipped == 1
    assert splitter.feed(b"x" * 10_000) == []
    assert splitter.feed(b'x"}\n{"b":2}\n') == [b'{"b":2}']  # not the skipped line's end
    assert splitter.feed(b'{"c":3}') == [] and splitter.flush() == b'{"c":3}'
    assert splitter.skipped == 1


def test_an_unterminated_line_past_the_limit_is_not_flushed() -> None:
    splitter = LineSplitter(LIMIT)
    splitter.feed(b"y" * (LIMIT + 1))
    assert splitter.flush() is None and splitter.skipped == 1


@pytest.mark.parametrize(
    "big",
    [b"data: " + b"z" * 3 * LIMIT + b"\n", b"data: zzzzzzzzzz\n" * 30],
    ids=["one-long-line", "many-data-lines"],
)
def test_an_sse_event_past_the_limit_is_skipped_and_the_next_one_read(big: bytes) -> None:
    stream = b"data: 1\n\n" + big + b"\n" + b"event: e\ndata: 2\n\n"
    for cut in range(0, len(stream), 7):
        splitter = SseSplitter(LIMIT)
        events = splitter.feed(stream[:cut]) + splitter.feed(stream[cut:]) + splitter.flush()
        assert [(e.event, e.data) for e in events] == [(None, b"1"), ("e", b"2")]
        assert splitter.skipped == 1
