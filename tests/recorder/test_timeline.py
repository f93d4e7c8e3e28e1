"""The chunk timeline: compact (one row, one blob), exact, and capped in text."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from ollama_tap.exchange import OutputChunk, OutputKind
from ollama_tap.recorder import Recorder
from ollama_tap.recorder.timeline import TEXT_CAP, Timeline, unpack
from tests.recorder.factory import chat_body, drive, exchange, pieces, stored

pytestmark = pytest.mark.usefixtures("blockbuster")


async def test_ten_thousand_chunks_are_one_row(recorder: Recorder) -> None:
    ex = exchange(body=chat_body())
    drive(recorder, ex, pieces(10_000, gap=0.001))
    await recorder.stop()

    def rows_and_blob() -> tuple[int, int]:
        with sqlite3.connect(recorder.store.path) as conn:
            count = conn.execute("SELECT count(*) FROM records").fetchone()[0]
            size = conn.execute("SELECT length(timeline) FROM records").fetchone()[0]
        return count, size

    count, size = await asyncio.to_thread(rows_and_blob)
    assert count == 1
    assert size < 10_000 * 30  # offsets, kinds, sizes and lengths, plus the text
    r = await stored(recorder, ex.id)
    assert len(r["timeline"]["offsets"]) == 10_000
    assert r["timeline"]["offsets"][-1] == pytest.approx(0.5 + 9_999 * 0.001)
    assert r["output"].startswith("tok1 tok2 ")
    assert r["output"].endswith("tok9999 ")


def test_pack_round_trip_keeps_order_kinds_and_unicode() -> None:
    tl = Timeline(keep_text=True)
    texts = [
        ("ü", OutputKind.CONTENT),
        ("🙂", OutputKind.THINKING),
        ('{"a":1}', OutputKind.TOOL_CALL),
    ]
    for i, (text, kind) in enumerate(texts):
        tl.add(i * 0.25, OutputChunk(0.0, kind, text, 40 + i))
    got = unpack(tl.pack())
    assert got == {
        "offsets": [0.0, 0.25, 0.5],
        "kinds": ["content", "thinking", "tool_call"],
        "bytes": [40, 41, 42],
        "texts": ["ü", "🙂", '{"a":1}'],
        "text_truncated": False,
    }


def test_text_past_the_cap_is_dropped_but_offsets_stay() -> None:
    tl = Timeline(keep_text=True)
    big = "x" * (TEXT_CAP // 2 + 1)
    for i in range(3):
        tl.add(float(i), OutputChunk(0.0, OutputKind.CONTENT, big, 1))
    got = unpack(tl.pack())
    assert got["text_truncated"] is True
    assert [len(t) for t in got["texts"]] == [len(big), 0, 0]
    assert got["offsets"] == [0.0, 1.0, 2.0]


def test_narrow_in_flight_fields_pack_as_uint32() -> None:
    """Sizes and lengths start a byte wide and widen as values grow; kinds are kept only
    once they differ. The blob is the same uint32 layout either way."""
    tl = Timeline(keep_text=True)
    sizes = [93, 255, 256, 65_535, 65_536, 2**32 - 1, 7]
    texts = ["a", "b" * 255, "c" * 256, "d", "e" * 70_000, "", "f"]
    kinds = [OutputKind.CONTENT] * 3 + [OutputKind.THINKING] + [OutputKind.CONTENT] * 3
    for i, (size, text, kind) in enumerate(zip(sizes, texts, kinds, strict=True)):
        tl.add(i / 8, OutputChunk(0.0, kind, text, size))
    got = unpack(tl.pack())
    assert got["bytes"] == sizes
    assert got["texts"] == texts
    assert got["kinds"] == [str(k) for k in kinds]
    assert got["offsets"] == [i / 8 for i in range(7)]


def test_size_beyond_uint32_still_raises() -> None:
    tl = Timeline(keep_text=False)
    with pytest.raises(OverflowError):
        tl.add(0.0, OutputChunk(0.0, OutputKind.CONTENT, "", 2**32))
