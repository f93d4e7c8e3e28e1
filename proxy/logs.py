"""structlog set-up: JSON lines on stderr, one event per line."""

from __future__ import annotations

import logging
import sys

import structlog
from aiohttp.http_exceptions import HttpProcessingError


class RequestBytesFilter(logging.Filter):
    """aiohttp's "Error handling request" for a request it cannot parse quotes the bytes it
    choked on (the request line with its `?token=…`, a header with its `Bearer …`): that
    line is logged without the exception, at info level (the client's mistake, not the
    proxy's), with the error's class and status only."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        said = f"{type(exc).__name__}, answered {exc.code} (the request is not quoted)"
        record.msg, record.args = f"{record.getMessage()}: {said}", ()
        record.exc_info, record.exc_text = None, None
        record.levelno, record.levelname = logging.INFO, "INFO"
        return logging.getLogger(record.name).isEnabledFor(logging.INFO)


REQUEST_BYTES_FILTER = RequestBytesFilter()


def configure(level: str = "info") -> None:
    """Route structlog and the standard library's loggers (aiohttp's) to JSON lines."""
    numeric = logging.getLevelName(level.upper())
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.JSONRenderer(),
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    # aiohttp's own access log would duplicate ours, without the measurements.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.server").addFilter(REQUEST_BYTES_FILTER)
