"""`ollama-tap replay`: serve recorded exchanges as an Ollama, and re-send them elsewhere.

`matching` keys requests, `render` turns a record back into wire bytes, `catalog` derives
the poller's routes, `serving` is the Ollama-shaped server, `sending` re-sends records,
`report` compares recorded and new figures, `thresholds` reads `--fail-if`.
"""
