"""The error of a setting that cannot work (its own module: config.py and the modules it
uses to check settings raise it alike)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting that cannot work; the message names the fix."""
