"""One validated Settings object; the CLI only maps flags and environment variables onto it."""

from __future__ import annotations

import enum
import ipaddress
import os
import re
import socket
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from yarl import URL

from ollama_tap import dbfile, pgurl
from ollama_tap.attribution import DEFAULT_HEADER, parse_rule
from ollama_tap.boxes.spec import (
    DEFAULT_UPSTREAM,
    BoxSpec,
    parse_boxes,
    parse_ollama_host,
    resolve_upstream,
)
from ollama_tap.pgurl import is_postgres_url
from ollama_tap.settings_error import ConfigError

__all__ = [
    "DEFAULT_UPSTREAM",
    "ConfigError",
    "RecordMode",
    "Settings",
    "is_postgres_url",
    "parse_ollama_host",
    "resolve_upstream",
]

_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}")
"""An HTTP header name (RFC 9110's token), bounded."""
MiB = 1024 * 1024


class RecordMode(enum.StrEnum):
    """What the recorder keeps (see README, "Recording and privacy")."""

    FULL = "full"
    METADATA = "metadata"
    OFF = "off"


def _xdg_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "ollama-tap"


class Settings(BaseSettings):
    """Every setting of ollama-tap; each is a flag of `serve` and an OLLAMA_TAP_* variable."""

    model_config = SettingsConfigDict(env_prefix="OLLAMA_TAP_", extra="forbid")

    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: Annotated[int, Field(ge=0, le=65535)] = Field(11435, description="Port to listen on.")
    upstream: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="Ollama's URL (else OLLAMA_HOST by Ollama's rules, else "
        + DEFAULT_UPSTREAM
        + "), or NAME=URL once per box to route between several (comma-separated in "
        "OLLAMA_TAP_UPSTREAM; docs/boxes.md).",
        json_schema_extra={"metavar": "[NAME=]URL"},
    )
    affinity: Literal["none", "client"] = Field(
        "none",
        description="With several boxes, 'client' keeps a client on the box it used last "
        "while its model is resident there without a reload (prompt-cache reuse).",
    )
    metrics: bool = Field(True, description="Measure exchanges and serve the metrics path.")
    metrics_path: str = Field("/metrics", description="Path of the Prometheus endpoint.")
    body_tee_limit: Annotated[int, Field(ge=0)] = Field(
        8 * MiB, description="Bytes of a JSON request body copied aside to read its fields."
    )
    reply_tee_limit: Annotated[int, Field(ge=0)] = Field(
        8 * MiB, description="Bytes of a single-object JSON reply kept to read its stats."
    )
    connect_timeout: Annotated[float, Field(gt=0)] = Field(
        10.0, description="Seconds to wait for a TCP connection to Ollama."
    )
    read_timeout: Annotated[float, Field(gt=0)] | None = Field(
        None,
        description="Seconds of upstream silence before giving up (none by default: Ollama "
        "sends nothing during load and prefill).",
    )
    shutdown_grace: Annotated[float, Field(ge=0)] = Field(
        30.0, description="Seconds in-flight exchanges may run on after SIGTERM."
    )
    poll_interval: Annotated[float, Field(gt=0)] = Field(
        10.0, description="Seconds between polls of /api/ps, /api/tags and /api/version."
    )
    model_label_cap: Annotated[int, Field(ge=1)] = Field(
        100,
        description="Most `model` label values for names Ollama served but does not list "
        "(listed names are not capped); the rest are `other`.",
    )
    # Recorder store and origin: --db is a SQLite file or a postgresql:// URL (one store
    # several taps share); every record names the tap that made it.
    db: Path | str | None = Field(
        None,
        description="SQLite database file, or a postgresql://user@host/db URL (password "
        "from the URL, PGPASSWORD or ~/.pgpass) (default: $XDG_DATA_HOME/ollama-tap/records.db).",
    )
    instance: str | None = Field(
        None, description="This tap's name in its records (default: the host name)."
    )
    record: RecordMode | None = Field(
        None, description="full, metadata or off (default: full on loopback, else metadata)."
    )
    record_routes: bool = Field(
        False, description="Also record polling GETs and HEADs (/api/tags, /api/ps, ...)."
    )
    retention_days: Annotated[float, Field(gt=0)] = Field(
        30.0, description="Records older than this are pruned."
    )
    retention_bytes: Annotated[int, Field(gt=0)] = Field(
        1024 * MiB, description="The database is pruned, oldest first, above this size."
    )
    db_timeout: Annotated[float, Field(gt=0)] = Field(
        30.0,
        description="Seconds a database read or PostgreSQL statement may take, and a "
        "PostgreSQL server may stay silent, before it counts as unavailable.",
    )
    recorder_queue: Annotated[int, Field(ge=1)] = Field(
        10_000, description="Records waiting for the writer; beyond it they are dropped."
    )
    admin_token: str | None = Field(
        None,
        description="Token for /_tap/ (default: generated and kept beside the database; "
        "'none' disables auth on loopback binds only).",
    )
    log_level: str = Field("info", description="debug, info, warning or error.")
    # Readable output: how the console log is written.
    log_format: Literal["auto", "console", "json"] = Field(
        "auto",
        description="'json': one JSON object a line; 'console': aligned, readable lines; "
        "'auto': console on a terminal, JSON when stderr is piped or redirected.",
    )
    tls_cert: Path | None = Field(None, description="PEM certificate to serve HTTPS.")
    tls_key: Path | None = Field(None, description="PEM private key for --tls-cert.")
    reload_guard: bool = Field(
        False,
        description="Send a request that would reload a resident model only for a smaller "
        "num_ctx, or another num_batch or num_thread, with the loaded model's values (logged, "
        "recorded, counted; docs/transparency.md).",
    )
    # OpenTelemetry export (ollama_tap/otel/, docs/opentelemetry.md): off unless an endpoint is set.
    otlp_endpoint: str | None = Field(
        None,
        description="OTLP collector URL that turns span export on (else "
        "OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT).",
    )
    otel_metrics: bool = Field(False, description="Also export the GenAI client metrics over OTLP.")
    otel_propagate: bool = Field(
        False,
        description="Send the proxy's CLIENT span upstream as the request's traceparent "
        "(with span export on; else the app's headers go up unchanged).",
    )
    # Client attribution (ollama_tap/attribution.py): which app sent each exchange.
    client_header: str = Field(
        DEFAULT_HEADER, description="Request header an app names itself in (forwarded as is)."
    )
    clients: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="NAME=CIDR or NAME=ua:GLOB rules naming clients, first match first; "
        "repeat --client (OLLAMA_TAP_CLIENTS: comma-separated).",
        json_schema_extra={"flag": "--client"},
    )
    client_label_cap: Annotated[int, Field(ge=1)] = Field(
        50,
        description="Most `client` label values besides the --client names; the rest are `other`.",
    )

    @field_validator("upstream", mode="before")
    @classmethod
    def _upstream(cls, v: object) -> object:
        if v is None:
            return ()
        if isinstance(v, str):
            return tuple(part.strip() for part in v.split(",") if part.strip())
        return v

    @field_validator("clients", mode="before")
    @classmethod
    def _clients(cls, v: object) -> object:
        if isinstance(v, str):
            v = [part.strip() for part in v.split(",") if part.strip()]
        if isinstance(v, list | tuple):
            for rule in v:
                parse_rule(str(rule))  # its ValueError names the fix
        return v

    @field_validator("client_header")
    @classmethod
    def _client_header(cls, v: str) -> str:
        if not _HEADER_NAME.fullmatch(v):
            raise ValueError(f"{v!r} is not a header name; give one like X-Ollama-Tap-Client")
        return v

    @field_validator("instance")
    @classmethod
    def _instance(cls, v: str | None) -> str | None:
        if v is not None and (not v.strip() or len(v) > 128 or not v.isprintable()):
            raise ValueError("must be 1 to 128 printable characters, e.g. gpu-box-1")
        return v

    @field_validator("metrics_path")
    @classmethod
    def _metrics_path(cls, v: str) -> str:
        if not v.startswith("/") or v.startswith("/_tap/"):
            raise ValueError("must start with '/' and lie outside /_tap/")
        return v

    @field_validator("db")
    @classmethod
    def _db(cls, v: Path | str | None) -> Path | str | None:
        # A URL stays text (psycopg reads it); anything else is a file.
        return None if v is None else pgurl.location(v)

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, v: str) -> str:
        if v.lower() not in {"debug", "info", "warning", "error"}:
            raise ValueError("must be debug, info, warning or error")
        return v.lower()

    @property
    def loopback_bind(self) -> bool:
        """Whether every address `host` binds is a loopback one (so `127.1`, or a host name
        that resolves to 127.0.0.1, count: what is bound decides, never how it is spelled).
        `serve` checks this against the sockets it bound."""
        return binds_loopback(self.host)

    @property
    def boxes(self) -> tuple[BoxSpec, ...]:
        """The Ollama boxes, in the order given (ollama_tap/boxes/spec.py)."""
        return _boxes(self.upstream, os.environ.get("OLLAMA_HOST"))[0]

    @property
    def named_boxes(self) -> bool:
        """Whether the boxes were named (NAME=URL): routing, and the `upstream` label."""
        return _boxes(self.upstream, os.environ.get("OLLAMA_HOST"))[1]

    @property
    def upstream_url(self) -> URL:
        """The first box's URL: the one upstream unless several are named."""
        return self.boxes[0].url

    @property
    def record_mode(self) -> RecordMode:
        if self.record is not None:
            return self.record
        return RecordMode.FULL if self.loopback_bind else RecordMode.METADATA

    @property
    def db_path(self) -> Path:
        """The SQLite file; with a PostgreSQL --db, the default one's place (the admin
        token is kept in its directory)."""
        return self.db if isinstance(self.db, Path) else _xdg_data_dir() / "records.db"

    @property
    def db_location(self) -> Path | str:
        """What the recorder writes to: the SQLite file or the PostgreSQL URL."""
        return self.db if isinstance(self.db, str) else self.db_path

    @property
    def instance_name(self) -> str:
        return self.instance or socket.gethostname()

    def check(self) -> None:
        """Refuse settings that cannot work, with a message that names the fix."""
        for box in self.boxes:
            if forwards_to_itself(up := box.url, self.host, self.port):
                raise ConfigError(
                    f"ollama-tap would forward to itself ({up} is its own listen address "
                    f"{self.host}:{self.port}); point --upstream or OLLAMA_TAP_UPSTREAM at "
                    "Ollama (e.g. http://127.0.0.1:11434), or unset OLLAMA_HOST in the "
                    "proxy's shell."
                )
        try:
            bind_addresses(self.host)
        except OSError as exc:
            raise ConfigError(
                f"--host {self.host!r} cannot be resolved ({exc.strerror or exc}); give an IP "
                "address (e.g. 127.0.0.1) or a name this machine resolves."
            ) from None
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("--tls-cert and --tls-key go together; give both or neither.")
        for flag, path in (("--tls-cert", self.tls_cert), ("--tls-key", self.tls_key)):
            if path is not None and not path.is_file():
                raise ConfigError(f"{flag} {path} is not a file; give the PEM file's path.")
        if isinstance(self.db, Path):
            dbfile.check(self.db)
        if self.admin_token == "none" and not self.loopback_bind:
            raise ConfigError(
                "--admin-token none is allowed on loopback binds only; recordings hold "
                "other people's prompts. Set a token or bind to 127.0.0.1."
            )


@lru_cache(maxsize=8)
def _boxes(values: tuple[str, ...], ollama_host: str | None) -> tuple[tuple[BoxSpec, ...], bool]:
    # Cached: the relay and the poller ask per box, and parsing is pure.
    return parse_boxes(values, ollama_host)


@lru_cache(maxsize=16)
def bind_addresses(host: str) -> tuple[str, ...]:
    """The addresses a listener on `host` binds, as asyncio's create_server resolves them
    (every result of a passive lookup; an empty host means every interface).

    Raises OSError when `host` does not resolve. Cached: resolved once, at start-up."""
    infos = socket.getaddrinfo(
        host or None, 0, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE
    )
    return tuple(dict.fromkeys(str(info[4][0]) for info in infos))


def binds_loopback(host: str) -> bool:
    try:
        return all_loopback(bind_addresses(host))
    except OSError:
        return False  # nothing can be bound either; Settings.check says so


def all_loopback(addresses: Iterable[str]) -> bool:
    """True when there is at least one address and each is a loopback one (`::ffff:127.x`
    included: a v4-mapped address is its IPv4 address)."""
    found = False
    for address in addresses:
        ip = ipaddress.ip_address(address.partition("%")[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if not ip.is_loopback:
            return False
        found = True
    return found


def is_loopback_host(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def forwards_to_itself(upstream: URL, listen_host: str, listen_port: int) -> bool:
    if upstream.port != listen_port or upstream.host is None:
        return False
    target = upstream.host.lower()
    if target == listen_host.lower():
        return True
    unspecified = listen_host in {"0.0.0.0", "::", ""}
    return is_loopback_host(target) and (unspecified or binds_loopback(listen_host))
