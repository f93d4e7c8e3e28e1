"""ollama-tap: a transparent Ollama proxy that measures, exports and records every exchange."""
