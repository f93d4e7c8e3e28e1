"""Model loads and their causes (rules L0–L7 of docs/diagnoses.md, "Loads").

`tracker.LoadTracker` is the observer; `options` computes a request's runner options and
their diff; `state` holds the per-runner rules; `events` the load event; `api` the route.
"""
