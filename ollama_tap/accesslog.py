"""The access-log observer: one structured JSON line per exchange."""

from __future__ import annotations

import logging
from collections.abc import Callable

import structlog

from ollama_tap.exchange import Exchange
from ollama_tap.hooks import Phase


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


class AccessLog:
    """Logs each exchange when it ends; never the body, the query or any credential.

    `client` is the app's name (`Exchange.client_name`, never folded into `other`),
    `address` the peer's. The model is logged as its metrics label (`label`,
    ModelLabels.label): a name Ollama has not vouched for is `other` here too, as on
    /metrics (the name is the client's free text until then); the record keeps the name.
    With several boxes the line names the exchange's box and why the router chose it.
    A JSON line carries every field; on a terminal, ollama_tap/logline.py makes it short.
    """

    name = "accesslog"
    phase = Phase.SINK

    def __init__(self, label: Callable[[object], str]) -> None:
        self.log = structlog.get_logger("ollama_tap.access")
        self.label = label

    def _line(self, ex: Exchange) -> None:
        if not self.log.is_enabled_for(logging.INFO):
            return  # --log-level warning: the line is not built at all
        self.log.info(
            "exchange",
            id=ex.id,
            client=ex.client_name or None,
            address=ex.client,
            method=ex.method,
            path=ex.path,
            endpoint=ex.endpoint,
            model=self.label(ex.model) or None,
            status=ex.status,
            outcome=str(ex.outcome),
            duration_ms=_ms(ex.duration),
            ttft_ms=_ms(ex.ttft),
            bytes_in=ex.request_bytes,
            bytes_out=ex.response_bytes,
            done_reason=ex.done_reason,
            error=ex.error_message,
            retried=None if ex.retried is None else ex.retried.value,
            **({"box": ex.box, "routed": ex.route.reason} if ex.route is not None else {}),
        )

    def response(self, ex: Exchange) -> None:
        self._line(ex)

    def error(self, ex: Exchange) -> None:
        self._line(ex)
