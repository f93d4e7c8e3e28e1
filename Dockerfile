# ollama-tap: the proxy on :11435, its recordings on the /data volume.

# The wheels: ollama-tap's hot modules are compiled (mypyc, see setup.py), which takes a
# C compiler that the image itself does not need.
FROM python:3.11-slim AS build
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY ollama_tap ./ollama_tap
# With the `postgres` extra (psycopg, for a postgresql:// --db: docs/recording.md) and the
# OpenTelemetry one (imported only when an OTLP endpoint is set: docs/opentelemetry.md).
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[postgres,otel]'

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    OLLAMA_TAP_HOST=0.0.0.0 \
    OLLAMA_TAP_PORT=11435 \
    OLLAMA_TAP_DB=/data/records.db

RUN groupadd --system --gid 10001 tap \
    && useradd --system --uid 10001 --gid tap --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin tap \
    && mkdir /data \
    && chown tap:tap /data \
    && chmod 0700 /data

RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels "$(ls /wheels/ollama_tap-*.whl)[postgres,otel]"

WORKDIR /data
USER 10001:10001
VOLUME ["/data"]
EXPOSE 11435

# healthz needs no token and answers 200 while the proxy serves (its body says whether
# Ollama is up); the image has python but no curl.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://localhost:%s/_tap/healthz' % os.environ.get('OLLAMA_TAP_PORT', '11435'), timeout=3)"]

CMD ["ollama-tap", "serve", "--host", "0.0.0.0"]
