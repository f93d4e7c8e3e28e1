"""The fast relay's exceptions.

Kept apart from the modules that use them because those are compiled (mypyc), and a
compiled class cannot derive from ConnectionError; these stay plain Python classes.
"""

from __future__ import annotations


class UpstreamGone(ConnectionError):
    """The upstream closed, broke or garbled the connection before its reply was complete."""


class UpstreamUnreachable(ConnectionError):
    """No connection to the upstream could be opened; the message names host, port and why."""


class ClientGone(ConnectionResetError):
    """The client closed its connection while its request body was still arriving."""
