"""The relay's downstream connections, WebSocket and HTTP streams alike, and their counts.

A connection is *open* from its accepting until it is over, *connected* once its ``Hello`` was
accepted (an HTTP stream is connected at once), and then known to the core. Beyond
``max_connections`` connected at once a new one is refused at its ``Hello`` (``room``). What
closed connections wrote is kept in the counts, so that ``GET /metrics`` never goes down.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from fanout.auth import Grant
from fanout.relay.api import Downstream
from fanout.relay.core.relaycore import RelayCore


class Clients:
    """The open connections, numbered from 1 in the order they came.

    Attributes:
        open: every open connection by client number.
        connected: the client numbers whose ``Hello`` was accepted.
        grants: what each connection's token grants (with authentication).
        finishing: connections over whose last frames are still going out (still counted).
        refused_full: ``Hello``s refused for want of room.
    """

    def __init__(self, core: RelayCore, max_connections: int) -> None:
        """Args:
        core: told of each connection connected and gone.
        max_connections: connections served at once at most.
        """
        self._core = core
        self._max = max_connections
        self._ids = itertools.count(1)
        self.open: dict[int, Downstream] = {}
        self.connected: set[int] = set()
        self.grants: dict[int, Grant] = {}
        self.finishing: set[Downstream] = set()
        self.refused_full = 0
        #: (frames, bytes) written to connections since closed, and how many were slow.
        self._closed_sent = (0, 0)
        self._slow_closed = 0

    def add(self, downstream: Downstream) -> int:
        """Count a new connection in (not connected yet); returns its client number."""
        client = next(self._ids)
        self.open[client] = downstream
        return client

    def connect(self, client: int, grant: object, capabilities: Sequence[str] = ()) -> None:
        """The connection's ``Hello`` was accepted, its token granting ``grant``."""
        self.connected.add(client)
        if isinstance(grant, Grant):
            self.grants[client] = grant
        self._core.on_connect(client, capabilities)

    def room(self) -> str | None:
        """Why a new connection is refused at its ``Hello``, or None."""
        if len(self.connected) < self._max:
            return None
        self.refused_full += 1
        return (
            f"the relay serves its most connections ({self._max}, max_connections);"
            " connect to another relay"
        )

    def full(self) -> bool:
        """Whether the relay serves its most connections."""
        return len(self.connected) >= self._max

    def remove(self, client: int) -> Downstream:
        """The connection is over: its subscriptions end; returns it."""
        self._core.on_disconnect(client)
        self.connected.discard(client)
        self.grants.pop(client, None)
        return self.open.pop(client)

    def closed(self, downstream: Downstream) -> None:
        """Keep what a connection over wrote in the counts."""
        frames, sent = self._closed_sent
        self._closed_sent = (frames + downstream.sent, sent + downstream.sent_bytes)
        self._slow_closed += downstream.closed_for is not None

    def counts(self) -> dict[str, int]:
        """Frames and bytes written, slow consumers closed (all connections ever), open and
        not yet greeted connections."""
        frames, sent = self._closed_sent
        live = [*self.open.values(), *self.finishing]
        return {
            "connections": len(self.open),
            "frames_sent": frames + sum(downstream.sent for downstream in live),
            "bytes_sent": sent + sum(downstream.sent_bytes for downstream in live),
            "slow_closed": self._slow_closed + sum(d.closed_for is not None for d in live),
            "ungreeted": len(self.open) - len(self.connected),
        }
