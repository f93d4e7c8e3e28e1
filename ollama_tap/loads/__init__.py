"""Model loads and their causes (research ollama-truncation-and-loads.md §10.B, L0-L7).

`tracker.LoadTracker` is the observer; `options` computes a request's runner options and
their diff; `state` holds the per-runner rules; `events` the load event; `api` the route.
"""
