"""Builds the hot modules with mypyc (see README "Performance"); OLLAMA_TAP_PURE_PYTHON=1
installs them as plain Python instead."""

from __future__ import annotations

import os

from setuptools import setup

HOT = [
    "proxy/exchange.py",
    "proxy/framing.py",
    "proxy/ollama.py",
    "proxy/hooks.py",
    "proxy/histogram.py",
    "proxy/fastrelay/front.py",
    "proxy/fastrelay/frontrelay.py",
    "proxy/fastrelay/reply.py",
    "proxy/fastrelay/pool.py",
    "proxy/fastrelay/wire.py",
    "proxy/fastrelay/relay.py",
    "proxy/fastrelay/connection.py",
    "proxy/forward.py",
    "proxy/metrics.py",
    "proxy/names.py",
    "proxy/accesslog.py",
    "proxy/recorder/record.py",
    "proxy/recorder/writer.py",
    "proxy/recorder/timeline.py",
    "proxy/recorder/redact.py",
    "proxy/recorder/scope.py",
    "proxy/recorder/__init__.py",
]

if os.environ.get("OLLAMA_TAP_PURE_PYTHON"):
    setup()
else:
    from mypyc.build import mypycify

    setup(ext_modules=mypycify(HOT, opt_level="3", debug_level="0"))
