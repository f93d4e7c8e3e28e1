"""Reading the proxy's metrics in tests: samples, series, and timings against injected delays."""

from __future__ import annotations

from tests.conftest import Proxy
from tests.support.waiting import eventually

TOL = 0.05
"""Allowed distance between a measured time and the injected one, in seconds."""

LLAMA = "llama3.2:latest"
QWEN = "qwen3:8b"
MESSAGES = [{"role": "user", "content": "Why is the sky blue?"}]


def samples(proxy: Proxy, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample called `name` in the proxy's registry, with its labels."""
    return [
        (dict(s.labels), s.value)
        for family in proxy.registry.collect()
        for s in family.samples
        if s.name == name
    ]


def in_flight(proxy: Proxy) -> float:
    return sum(value for _, value in samples(proxy, "ollama_tap_requests_in_flight"))


async def settled(proxy: Proxy) -> None:
    """Wait until every exchange the proxy started has ended (and been measured)."""
    await eventually(lambda: in_flight(proxy) == 0)


def hist(proxy: Proxy, name: str, **labels: str) -> tuple[float, float]:
    """(count, sum) of one histogram series; (0, 0) when it was never observed."""
    full = f"ollama_tap_{name}"
    count = proxy.sample(f"{full}_count", labels)
    total = proxy.sample(f"{full}_sum", labels)
    return (count or 0.0, total or 0.0)


def counter(proxy: Proxy, name: str, **labels: str) -> float | None:
    return proxy.sample(f"ollama_tap_{name}", labels)


def near(measured: float, expected: float, tol: float = TOL) -> bool:
    return abs(measured - expected) <= tol


SLACK = 0.002
"""How much sooner than asked a timer may fire (the loop's clock resolution)."""


def took(measured: float, truth_ns: int, injected: float) -> bool:
    """A time the proxy measured against the time the fake really took (from its final
    object, in ns): on a busy machine each of the fake's sleeps overruns by a few ms and a
    dozen of them add up past TOL, so the injected delays only bound it from below."""
    return near(measured, truth_ns / 1e9) and measured >= injected - SLACK


def within(measured: float, upstream_ns: int, client: float) -> bool:
    """A duration the proxy measured, between the upstream's own (in ns; the request reached
    the proxy before the upstream, and the reply's end left the proxy after the upstream
    wrote it) and the client's (which holds the proxy's): bounds that hold however loaded
    the machine, where a tolerance around either does not."""
    return upstream_ns / 1e9 <= measured <= client


def native(endpoint: str, model: str, stream: str | None = None) -> dict[str, str]:
    labels = {"endpoint": endpoint, "model": model}
    return labels if stream is None else {**labels, "stream": stream}


GEN = native("/api/generate", LLAMA)


async def upstream_polled(proxy: Proxy) -> None:
    """Wait until the poller has read /api/version and /api/tags once."""
    info = {"model": LLAMA, "family": "llama", "parameter_size": "3.2B", "quantization": "Q4_K_M"}
    await eventually(
        lambda: (
            proxy.sample("ollama_tap_upstream_up") == 1
            and proxy.sample("ollama_tap_model_info", info) == 1
        )
    )
