"""A throwaway NATS server (testing/nats.py), started for real where nats-server is installed."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from fanout.testing import nats as testing_nats
from fanout.testing.nats import NatsMissing, throwaway_nats

needs_nats = pytest.mark.needs("nats-server")


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 1).close()
    except OSError:
        return False
    return True


@needs_nats
def test_a_server_listens_on_loopback_restarts_on_its_port_and_leaves_nothing() -> None:
    before = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("fanout-nats-*"))
    with throwaway_nats() as server:
        assert server.url == f"nats://127.0.0.1:{server.port}"
        assert listening(server.port)
        server.kill()
        assert not listening(server.port)
        server.restart()
        assert listening(server.port)
    assert not listening(server.port)
    assert set(Path(os.environ.get("TMPDIR", "/tmp")).glob("fanout-nats-*")) == before


def test_without_nats_server_it_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(testing_nats, "find", lambda _: None)
    with pytest.raises(NatsMissing, match=r"Debian package nats-server"), throwaway_nats():
        pass
