"""Advice, not just verdicts: per model and client over a window, how many prompts did not
fit, the context that would have held them, and what that context costs in memory."""
