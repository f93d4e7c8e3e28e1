"""Token ids back to text with a model's own vocabulary, and the local Ollama model store."""
