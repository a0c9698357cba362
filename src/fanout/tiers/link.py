"""One connection from a relay below, its asyncio side (``tiers.below`` decides).

The relay's subscriber port takes it: the handshake is the subscribers' (``Hello``, ``Welcome``),
then the connection is handed here, where its frames are read as the publisher reads a relay's
(``wire.codec.to_publisher``). What it is sent goes through the relay's one dispatch, like every
frame the relay sends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from websockets.asyncio.server import ServerConnection

from fanout.errors import ProtocolError
from fanout.relay.core.sends import Send
from fanout.tiers.below import Relays
from fanout.wire import codec
from fanout.wire.handshake import MAX_BAD_FRAMES
from fanout.wire.messages import Error, Hello


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
