"""Truncation and overflow verdicts (docs/diagnoses.md, "Truncation")."""
