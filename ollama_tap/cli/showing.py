"""`records show` for a person: the head facts, the inspector's timing table with units and
derived rates, and a sentence for what the record's route cannot have."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from ollama_tap import ollama
from ollama_tap.cli.figures import is_cold, local_iso, rate, seconds, size, usage_of

Record = dict[str, Any]
Timing = tuple[str, Callable[[Record], str], str]

TIMINGS: Final[tuple[Timing, ...]] = (
    ("client TTFT", lambda r: seconds(r["ttft"]), "first output chunk written to the client"),
    ("time to first content", lambda r: seconds(r["ttfc"]), "the same, thinking not counted"),
    ("server TTFT", lambda r: seconds(r["server_ttft"]), "Ollama's clock: first chunk - start"),
    ("client overhead", lambda r: seconds(r["client_overhead"]), "client TTFT - server TTFT"),
    ("load", lambda r: seconds(r["load"]), "body read, scheduler wait and model load"),
    ("queue wait", lambda r: seconds(r["queue_wait"]), "total - load - prefill - decode"),
    ("prefill", lambda r: seconds(r["prefill"]), "prompt_eval_duration"),
    ("decode", lambda r: seconds(r["decode"]), "eval_duration"),
    ("server total", lambda r: seconds(r["total"]), "total_duration"),
    ("duration", lambda r: seconds(r["duration"]), "until the last byte was written"),
    ("prompt tokens", lambda r: _count(r["prompt_tokens"]), "prompt_eval_count"),
    ("cached prompt tokens", lambda r: _count(r["cached_tokens"]), "prompt_eval_cached_count"),
    ("output tokens", lambda r: _count(r["eval_tokens"]), "eval_count"),
    ("context size", lambda r: _count(r["context_len"]), "ids in the reply's context"),
    ("decode rate", lambda r: rate(usage_of(r).decode_rate), "eval_count / eval_duration"),
    ("prefill rate", lambda r: rate(usage_of(r).prefill_rate), "uncached prompt / prefill"),
)


def _count(value: int | None) -> str:
    return "" if value is None else f"{value:,}".replace(",", " ")


def route_lacks(endpoint: str) -> str | None:
    """What a route can never report, as one sentence; None for Ollama's native routes."""
    if endpoint in ollama.EMBEDDING_ENDPOINTS:
        return "Embeddings have no stream: no TTFT, output tokens or decode phase."
    if ollama.family_of(endpoint) != "ollama":
        return (
            "OpenAI-style routes carry no phase timings: Ollama reports load, queue wait, "
            "prefill and decode on its native /api routes only."
        )
    return None


def timing_lines(record: Record) -> list[str]:
    """The known timings, aligned, then one line on the unknown ones and why."""
    known = [(name, value(record), how) for name, value, how in TIMINGS if value(record)]
    unknown = [name for name, value, _ in TIMINGS if not value(record)]
    wide = max((len(v) for _, v, _ in known), default=0)
    lines = [f"  {name:<22}{value:>{wide}}   {how}" for name, value, how in known]
    lacks = route_lacks(record.get("endpoint") or "")
    if lacks:
        lines.append(f"  {lacks}")
    elif unknown:
        lines.append(f"  Not reported for this reply: {', '.join(unknown)}.")
    return lines


def _stands_out(record: Record) -> list[str]:
    notes = []
    if is_cold(record):
        notes.append(f"cold start (load {seconds(record['load'])})")
    total = record.get("total") or 0
    for key, name in (("queue_wait", "queue"), ("prefill", "prefill")):
        value = record.get(key) or 0
        if value >= 1 and total and value / total >= 0.3:
            notes.append(f"long {name} ({seconds(value)}, {value / total:.0%} of the server time)")
    return notes


def headline(record: Record) -> list[str]:
    """The outcome, client TTFT, decode rate and what stands out, in lines of 80 columns."""
    parts = [record["outcome"]]
    if record.get("ttft") is not None:
        parts.append(f"TTFT {seconds(record['ttft'])}")
    decode = usage_of(record).decode_rate
    if decode is not None:
        parts.append(f"decode {rate(decode)}")
    return _wrapped([*parts, *_stands_out(record)])


WIDTH: Final = 80


def _wrapped(parts: list[str], width: int = WIDTH) -> list[str]:
    """Parts joined by " · ", a new line before the part that would pass `width`."""
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 3 + len(part) > width:
            lines.append(part)
        else:
            lines[-1] += " · " + part
    return lines


def verdict_lines(record: Record) -> list[str]:
    """What a person opens a record for, right under the outcome: truncated or not (and the
    tokens lost), the load it met and why, and which app sent it."""
    verdict = record.get("truncation")
    if verdict:
        lost = verdict.get("tokens_lost")
        said = f"{verdict['kind']} ({verdict['rule']})"
        said += f", {_count(lost)} prompt tokens lost" if lost else ""
        lines = [f"truncated: {said}", f"  {verdict.get('explanation') or ''}".rstrip()]
    else:
        lines = ["truncated: no verdict (none of the rules found a cut)"]
    event = record.get("load_event")
    if event:
        said = event["cause"] + (f" ({event['detail']})" if event.get("detail") else "")
        if event.get("load_duration") is not None:
            said += f", {seconds(event['load_duration'])}"
        role = event.get("role")
        said += ", triggered by this request" if role == "trigger" else ", waited for it"
        lines.append(f"load: {said}")
    else:
        lines.append("load: none met (the model was loaded, or no load was seen)")
    guard = record.get("reload_guard")
    if guard:
        changed = ", ".join(f"{c['field']} {c['from']} → {c['to']}" for c in guard["changes"])
        lines.append(f"reload guard: {changed} (the loaded model's)")
    name, address = record.get("client_name"), record.get("client")
    if name or address:
        lines.append(f"client: {name or 'unnamed'}" + (f" ({address})" if address else ""))
    return [line for line in lines if line]


def head_lines(record: Record, short_id: str) -> list[str]:
    sizes = f"request {size(record['request_bytes'])}, reply {size(record['response_bytes'])}"
    if record.get("chunks") is not None:
        sizes += f", {record['chunks']} chunks"
    digest = record.get("model_digest")
    status = f"{record['status'] or 'none'}, {'streamed' if record['streamed'] else 'one reply'}"
    if record.get("done_reason"):
        status += f", done reason {record['done_reason']}"
    facts = [
        ("id", record["id"] if short_id == record["id"] else f"{short_id} ({record['id']})"),
        ("started", local_iso(record["started"])),
        ("request", f"{record['method']} {record['path']}"),
        ("model", (record.get("model") or "") + (f" ({digest[:19]})" if digest else "")),
        ("Ollama", record.get("ollama_version")),
        ("box", record.get("box") if record.get("route") else None),
        ("route", record.get("route")),
        ("status", status),
        ("privacy mode", record.get("mode")),
        ("sizes", sizes),
        ("Ollama's error", record.get("error_message")),
        ("sent again", record.get("retried")),
    ]  # fmt: skip
    lines = [*headline(record), *verdict_lines(record), ""]
    lines += [f"{name:>14}: {value}" for name, value in facts if value not in (None, "")]
    return [*lines, "", "[timings]", *timing_lines(record)]
