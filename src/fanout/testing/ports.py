"""Free loopback ports, for servers a test or benchmark starts as separate processes.

A server in this process should listen on port 0 and report the port it got; a port from
:func:`free_port` is for a program that must be told its port before it starts (a PostgreSQL
server, a Spark daemon). Another process may take the port in between: a rare race that the
program's start then reports.
"""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """Return a loopback TCP port that nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])
