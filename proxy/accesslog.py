"""The access-log observer: one structured JSON line per exchange."""

from __future__ import annotations

import logging

import structlog

from proxy.exchange import Exchange
from proxy.names import recordable


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


class AccessLog:
    """Logs each exchange when it ends; never the body, the query or any credential."""

    name = "accesslog"

    def __init__(self) -> None:
        self.log = structlog.get_logger("ollama_tap.access")

    def _line(self, ex: Exchange) -> None:
        if not self.log.is_enabled_for(logging.INFO):
            return  # --log-level warning: the line is not built at all
        self.log.info(
            "exchange",
            id=ex.id,
            client=ex.client,
            method=ex.method,
            path=ex.path,
            endpoint=ex.endpoint,
            model=recordable(ex.model),
            status=ex.status,
            outcome=str(ex.outcome),
            duration_ms=_ms(ex.duration),
            ttft_ms=_ms(ex.ttft),
            bytes_in=ex.request_bytes,
            bytes_out=ex.response_bytes,
            done_reason=ex.done_reason,
            error=ex.error_message,
            retried=None if ex.retried is None else ex.retried.value,
        )

    def response(self, ex: Exchange) -> None:
        self._line(ex)

    def error(self, ex: Exchange) -> None:
        self._line(ex)
