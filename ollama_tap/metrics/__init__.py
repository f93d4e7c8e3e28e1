"""Prometheus metrics: the family table, the families on a registry, the observer, and the
histograms counted on the loop (each imported from its module: the observer needs aiohttp's
server, which the recorder's and the CLI's imports must not pull in).

No family carries a `_created` series. prometheus-client adds one per counter and histogram
label set (when it was made), which no dashboard, alert or `rate()` reads and Prometheus
ignores unless told otherwise; docs/operations.md weighs a scrape with and without them.
The library's switch is process-wide and read when a series is made, so it is thrown here,
before any family of the package exists, and the tests and the app expose the same lines.
"""

from prometheus_client import disable_created_metrics

disable_created_metrics()  # type: ignore[no-untyped-call]
