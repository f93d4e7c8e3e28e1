"""structlog set-up: one event a line on stderr, readable on a terminal, JSON otherwise."""

from __future__ import annotations

import logging
import sys

import structlog
from aiohttp.http_exceptions import HttpProcessingError

from ollama_tap.logline import for_terminal


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


def renderer(log_format: str = "json") -> structlog.types.Processor:
    """The last processor: JSON for log collectors and pipes, short text for a person.

    "auto" asks whether stderr is a terminal: a log shipped to a file or a collector stays
    one JSON object a line with every field, the same events a person watching `serve`
    reads one short line each (ollama_tap/logline.py).
    """
    console = log_format == "console" or (log_format == "auto" and sys.stderr.isatty())
    if console:
        # Plain tracebacks: rich's would print every frame's locals, a token among them.
        return structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(),
            sort_keys=False,
            exception_formatter=structlog.dev.plain_traceback,
            pad_event_to=0,
            pad_level=False,
        )
    return structlog.processors.JSONRenderer()


def _for(render: structlog.types.Processor) -> list[structlog.types.Processor]:
    """What runs before the renderer: for a person, the short line (a local time, no
    date: the terminal is watched now); for JSON, the UTC time and every field."""
    if isinstance(render, structlog.dev.ConsoleRenderer):
        return [structlog.processors.TimeStamper(fmt="%H:%M:%S", utc=False), for_terminal]
    return [structlog.processors.TimeStamper(fmt="iso", utc=True)]


def _exceptions(render: structlog.types.Processor) -> list[structlog.types.Processor]:
    # The console renderer prints a traceback itself; JSON needs it as a string field.
    if isinstance(render, structlog.dev.ConsoleRenderer):
        return []
    return [structlog.processors.format_exc_info]


def configure(level: str = "info", log_format: str = "json") -> None:
    """Route structlog and the standard library's loggers (aiohttp's) to stderr, each line
    rendered by `renderer(log_format)`."""
    numeric = logging.getLevelName(level.upper())
    render = renderer(log_format)
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        *_for(render),
    ]
    structlog.configure(
        processors=[*shared, *_exceptions(render), render],
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
                render,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    # aiohttp's own access log would duplicate ours, without the measurements.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.server").addFilter(REQUEST_BYTES_FILTER)
