"""A reader's or producer's connection to the publisher (client/publisher.py), against a
scripted publisher on a real socket."""

from __future__ import annotations

import asyncio

import pytest
from websockets.asyncio.server import ServerConnection, serve

from fanout.client.publisher import open_reader
from fanout.client.subscriber import SubscriptionError
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.messages import PROTOCOL_VERSION, Hello, Welcome


async def test_a_publisher_that_sends_garbage_fails_every_request_instead_of_hanging() -> None:
    closed: list[int | None] = []

    async def publisher(websocket: ServerConnection) -> None:  # a broken one: no catalog
        assert isinstance(codec.to_publisher().decode(await websocket.recv()), Hello)
        await websocket.send(codec.encode(Welcome(PROTOCOL_VERSION, "broken", "s")))
        await websocket.send(b"\xc1")  # not msgpack
        await websocket.wait_closed()
        closed.append(websocket.close_code)

    async with serve(publisher, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        async with open_reader(f"ws://127.0.0.1:{port}") as reader:
            with pytest.raises(SubscriptionError, match="protocol: malformed frame"):
                await asyncio.wait_for(reader.catalog(), 5)
            with pytest.raises(SubscriptionError, match="protocol: malformed frame"):
                await asyncio.wait_for(reader.read("agents", Box((0, 0), (1, 1))), 5)
    assert closed == [1002]
