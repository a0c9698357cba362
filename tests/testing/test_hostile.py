"""The hostile peers' own conduct (``fanout.testing.hostile``): a connection sending bad frames
in a row waits for the server's close, so that a server slow to read them is still seen to
close it as it should."""

from __future__ import annotations

import asyncio

from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.frames import CloseCode

from fanout.testing.hostile import Tally, misbehave


async def test_bad_frames_wait_for_a_slow_servers_close() -> None:
    async def slow(websocket: ServerConnection) -> None:  # reads late, closes after four
        for _ in range(4):
            await websocket.recv()
            await asyncio.sleep(0.2)
        await websocket.close(CloseCode.POLICY_VIOLATION, "4 bad frames in a row")

    async with serve(slow, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        tally = Tally()
        async with connect(f"ws://127.0.0.1:{port}") as websocket:
            until = asyncio.get_running_loop().time() + 0.1  # over before the server closes
            await misbehave(websocket, 0, until, tally)
    assert tally.closes == {1008: 1}
    assert tally.violation_count == 0
