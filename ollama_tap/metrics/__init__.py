"""Prometheus metrics: the family table, the families on a registry, the observer, and the
histograms counted on the loop (each imported from its module: the observer needs aiohttp's
server, which the recorder's and the CLI's imports must not pull in)."""
