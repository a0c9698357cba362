"""A link to another relay of the map, the one responsible for parts this relay forwards
(``cluster.upstreams``): its asyncio side.

The link connects to the other relay's port as a relay below it would (``Hello{role:
"relay"}``; the other relay serves relays, ``tiers``), sends the ``Acquire`` and
``Release`` frames routed to it (those offered before it is connected wait, in order), and hands
every batch it reads to ``on_batch``. It does not reconnect: when it is lost or refused, it says
so once (``on_lost``) and ends; the relay then routes that relay's parts to the publisher until
it is reachable again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from websockets.exceptions import ConnectionClosed

from fanout import tls
from fanout.connection import Outbound, dial
from fanout.errors import ProtocolError
from fanout.wire import codec
from fanout.wire.handshake import check_welcome
from fanout.wire.messages import PROTOCOL_VERSION, Batch, Catalog, Error, Hello, Resync

log = logging.getLogger(__name__)

#: Largest frame accepted from a relay (a batch with a big snapshot), as from the publisher.
MAX_FROM_RELAY = 256 << 20
#: Frames offered before the link is connected, at most; beyond, the link is given up.
MAX_WAITING = 100_000


class PeerLink:
    """One connection to the relay named ``name`` at ``url``, until it is lost."""

    def __init__(
        self,
        name: str,
        url: str,
        *,
        me: str,
        token: str = "",
        tls_ca: Path | None = None,
        on_batch: Callable[[str, Batch], Awaitable[None]],
        on_error: Callable[[str, Error], None],
        on_resync: Callable[[str, Resync], Awaitable[None]],
    ) -> None:
        """Args:
        name: the other relay's name in the map.
        url: its URL in the map.
        me: this relay's name (its ``Hello``).
        token: this relay's token, if the other relay authenticates.
        tls_ca: CA file to check a ``wss://`` relay with.
        on_batch: awaited with (name, batch) for every batch read, in order.
        on_error: called with (name, error) for an error the other relay sent.
        on_resync: awaited with (name, ``Resync``) the other relay sent, after its batches
            before it.
        """
        self.name, self.url = name, url
        self._me, self._token, self._tls_ca = me, token, tls_ca
        self._on_batch, self._on_error, self._on_resync = on_batch, on_error, on_resync
        self._outbound: Outbound | None = None
        self._waiting: list[bytes] = []
        self._transport: object | None = None
        self.lost: str | None = None

    def close(self) -> None:
        """Drop the connection (``run`` then ends)."""
        abort = getattr(self._transport, "abort", None)
        if abort is not None:
            abort()

    def send(self, data: bytes) -> None:
        """Send a frame, at once if connected, else when connected."""
        if self._outbound is not None:
            self._outbound.offer(data)
        elif len(self._waiting) < MAX_WAITING:
            self._waiting.append(data)

    async def run(self) -> None:
        """Connect and follow the other relay until the connection ends; ``lost`` then says
        why."""
        try:
            await self._follow()
            self.lost = "closed"
        except (OSError, ConnectionClosed, ProtocolError, TimeoutError) as exc:
            self.lost = str(exc) or type(exc).__name__
            log.warning("relay %s (%s): %s", self.name, self.url, self.lost)
        except Exception as exc:  # a batch of it failed to write: the relay keeps running
            self.lost = f"{type(exc).__name__}: {exc}"
            log.exception("relay %s (%s): link dropped", self.name, self.url)
        finally:
            self._outbound = None

    async def _follow(self) -> None:
        async with dial(
            self.url,
            max_size=MAX_FROM_RELAY,
            compression=None,
            open_timeout=10,
            ssl=tls.for_url(self.url, self._tls_ca),
        ) as websocket:
            decoder = codec.from_publisher()
            hello = Hello(version=PROTOCOL_VERSION, role="relay", name=self._me, token=self._token)
            await websocket.send(codec.encode(hello))
            check_welcome(decoder.decode(await websocket.recv()))
            self._transport = websocket.transport
            async with Outbound(websocket, limit=MAX_WAITING) as outbound:
                async for message in websocket:
                    frame = decoder.decode(message)
                    match frame:
                        case Batch():
                            await self._on_batch(self.name, frame)
                        case Catalog():
                            self._outbound = outbound
                            for data in self._waiting:
                                outbound.offer(data)
                            self._waiting.clear()
                        case Error():
                            self._on_error(self.name, frame)
                        case Resync():
                            await self._on_resync(self.name, frame)
