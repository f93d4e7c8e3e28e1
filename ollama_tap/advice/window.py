"""The records of a window, tallied per model and client: requests, verdicts, the largest need.

Two reads, both at constant memory whatever the window: one aggregate query over the
records without a verdict (their count and largest `prompt_tokens + eval_tokens`, portable
SQL for SQLite and PostgreSQL alike), and the records with a verdict, page by page (their
need depends on the verdict's rule and counts, `sizing.need_of`). Blocking, like `Store`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from ollama_tap.advice.sizing import CUT_KINDS, Need, need_of
from ollama_tap.cloud import is_cloud_model
from ollama_tap.facts import TruncationKind
from ollama_tap.ollama import EMBEDDING_ENDPOINTS, INFERENCE_ENDPOINTS
from ollama_tap.recorder.store import Filters, Store

JUDGED: Final = tuple(sorted(INFERENCE_ENDPOINTS | EMBEDDING_ENDPOINTS))
"""The endpoints whose prompts meet a context (the truncation rules judge them)."""
PAGE: Final = 500
OVERFLOW_KINDS: Final = frozenset({TruncationKind.CONTEXT_SHIFT, TruncationKind.OUTPUT_CUT})
"""Verdicts whose prompt fit but whose output ran out of context."""


@dataclass(frozen=True, slots=True)
class Tally:
    """One model and client over the window."""

    model: str
    client: str | None
    requests: int = 0
    cut: int = 0
    """Prompts truncated or refused (CUT_KINDS)."""
    overflowed: int = 0
    """Replies that shifted or were cut by the context (OVERFLOW_KINDS)."""
    need: Need | None = None
    context: int | None = None
    """The largest `C` a verdict was judged against."""

    def add(self, need: Need | None, kind: str | None, context: int | None) -> Tally:
        """This tally with one more record that has a verdict."""
        most = None if need is None else need.most(self.need)
        contexts = [c for c in (context, self.context) if c]
        return replace(
            self,
            requests=self.requests + 1,
            cut=self.cut + (kind in CUT_KINDS),
            overflowed=self.overflowed + (kind in OVERFLOW_KINDS),
            need=most or self.need,
            context=max(contexts) if contexts else None,
        )


def tally(store: Store, filters: Filters) -> list[Tally]:
    """Every model and client with a judged request in the window (cloud models left out:
    their context is not this box's), busiest first."""
    found: dict[tuple[str, str | None], Tally] = {}
    clauses, params = filters.where()
    clauses += ["truncation IS NULL", f"endpoint IN ({', '.join('?' * len(JUDGED))})"]
    rows = store.source.rows(
        "SELECT model, client_name, COUNT(*) AS n, "
        "MAX(prompt_tokens + COALESCE(eval_tokens, 0)) AS most "
        f"FROM records WHERE {' AND '.join(clauses)} GROUP BY model, client_name",
        [*params, *JUDGED],
    )
    for row in rows:
        most = row["most"]
        key = (row["model"] or "", row["client_name"])
        need = None if most is None else Need(int(most), True)
        found[key] = Tally(*key, requests=int(row["n"]), need=need)
    cursor: str | None = None
    verdicts = replace(filters, truncated=True)
    while True:
        page, cursor = store.page(verdicts, PAGE, cursor)
        for r in page:
            key = (r["model"] or "", r["client_name"])
            verdict = r["truncation"]
            need = need_of(r["prompt_tokens"], r["eval_tokens"], verdict)
            found[key] = found.get(key, Tally(*key)).add(
                need, verdict.get("kind"), verdict.get("context")
            )
        if cursor is None:
            break
    kept = [t for t in found.values() if t.model and not is_cloud_model(t.model)]
    return sorted(kept, key=lambda t: (-t.requests, t.model, t.client or ""))
