"""Free loopback ports (testing/ports.py)."""

from __future__ import annotations

import socket

from fanout.testing.ports import LOOPBACK, free_port


def test_a_free_port_can_be_listened_on_at_once() -> None:
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as server:
        server.bind((LOOPBACK, port))
        server.listen()
        with socket.create_connection((LOOPBACK, port), timeout=5):
            pass
