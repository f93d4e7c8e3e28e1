"""Before and after an Ollama upgrade: the box's own recorded traffic, per Ollama version,
compared per model and context class (`ollama-tap upgrade-check`, docs/upgrades.md)."""
