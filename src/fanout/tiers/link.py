"""Relays below this one, their asyncio side (``tiers.below`` decides): a front end
(``relay.api.FrontEnd``).

The relay's subscriber port takes each: the handshake is the subscribers' (``Hello``,
``Welcome``), then the connection is handed here (``Tiers.serve``), where its frames are read as
the publisher reads a relay's (``wire.codec.to_publisher``). What it is sent goes through the
relay's one dispatch, like every frame the relay sends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from fanout.errors import ProtocolError
from fanout.relay.api import RelayApi
from fanout.relay.core.sends import Send
from fanout.tiers.below import Relays
from fanout.wire import codec
from fanout.wire.handshake import MAX_BAD_FRAMES
from fanout.wire.messages import Error, Hello


class Tiers:
    """The relays below this one: served once greeted on the subscriber port, told to connect
    again when this relay loses its upstream."""

    def __init__(self, relays: Relays, dispatch: Callable[[Iterable[Send]], None]) -> None:
        """Args:
        relays: what the relays below hold (``tiers.below``).
        dispatch: sends what their frames made the relay send (``cluster.sharing`` routes
            acquisitions under the forward policy).
        """
        self.relays = relays
        self._dispatch = dispatch
        self._below: dict[int, ServerConnection] = {}
        self._relay: RelayApi | None = None
        self._tasks: asyncio.TaskGroup | None = None

    async def start(self, relay: RelayApi, tasks: asyncio.TaskGroup) -> None:
        """Serve relays below from now on (the subscriber port brings them)."""
        self._relay, self._tasks = relay, tasks

    async def stop(self) -> None:
        """Nothing of its own to stop: its connections are the subscriber port's."""

    async def serve(self, client: int, websocket: ServerConnection, hello: Hello) -> str | None:
        """Serve a greeted relay below (``serve_below``); returns why to close it, if it is."""
        assert self._relay is not None, "the tiers front end is not started"
        self._below[client] = websocket
        try:
            return await serve_below(
                self.relays,
                client,
                websocket,
                hello,
                dispatch=self._dispatch,
                wake=self._relay.wake,
            )
        finally:
            self._below.pop(client, None)

    def close(self, client: int) -> None:
        """Close a relay below's connection (this relay lost its upstream): it connects again."""
        below = self._below.get(client)
        if below is not None and self._tasks is not None:
            self._tasks.create_task(_going_away(below))


async def _going_away(websocket: ServerConnection) -> None:
    with contextlib.suppress(ConnectionClosed):
        await websocket.close(CloseCode.GOING_AWAY, "upstream lost; connect again")


async def serve_below(
    relays: Relays,
    client: int,
    websocket: ServerConnection,
    hello: Hello,
    *,
    dispatch: Callable[[Iterable[Send]], None],
    wake: Callable[[], None],
) -> str | None:
    """Serve one relay below until it goes away.

    Returns:
        Why the connection is to be closed (the relay is not connected upstream, or the
        connection sent too many bad frames), or None when it closed by itself.
    """
    welcomed = relays.welcome(client, hello)
    if isinstance(welcomed, Error):
        dispatch([Send(client, welcomed)])
        return welcomed.message
    dispatch(welcomed)
    decoder = codec.to_publisher()
    bad = 0
    try:
        async for message in websocket:
            try:
                frame = decoder.decode(message)
                if isinstance(frame, Hello):
                    raise ProtocolError("duplicate hello: the handshake is already done")
            except ProtocolError as exc:
                bad += 1
                closing = bad >= MAX_BAD_FRAMES
                reason = f"{exc} ({bad} bad frames in a row; closing)" if closing else str(exc)
                dispatch([Send(client, Error("protocol", reason))])
                if closing:
                    return reason
                continue
            bad = 0
            dispatch(relays.on_frame(client, frame))
            wake()
    finally:
        relays.gone(client)
    return None
