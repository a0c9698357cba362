"""The cuttable TCP proxy (testing/proxy.py): bytes go through both ways; a cut closes both ends
of each connection and the next connection goes through again."""

from __future__ import annotations

import asyncio

from fanout.testing.ports import LOOPBACK
from fanout.testing.proxy import proxy


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
    except ConnectionResetError:
        pass  # a cut: an end the proxy aborted
    finally:
        writer.close()


async def test_bytes_go_through_and_a_cut_closes_both_ends() -> None:
    closed = asyncio.Event()

    async def server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await echo(reader, writer)
        closed.set()  # the server's end saw the cut

    async with await asyncio.start_server(server, LOOPBACK, 0) as listening:
        target = (LOOPBACK, listening.sockets[0].getsockname()[1])
        async with proxy(target) as link:
            reader, writer = await asyncio.open_connection(LOOPBACK, link.port)
            writer.write(b"hello")
            assert await reader.readexactly(5) == b"hello"
            assert link.cut() == 2
            assert await asyncio.wait_for(reader.read(), 5) == b""  # the client's end closed
            await asyncio.wait_for(closed.wait(), 5)
            writer.close()
            await writer.wait_closed()
            assert link.cut() == 0  # nothing open

            reader, writer = await asyncio.open_connection(LOOPBACK, link.port)
            writer.write(b"again")
            assert await reader.readexactly(5) == b"again"
            assert link.connections == 2
            writer.close()
            await writer.wait_closed()


async def test_a_target_that_is_not_there_closes_the_connection() -> None:
    async with await asyncio.start_server(echo, LOOPBACK, 0) as listening:
        gone = (LOOPBACK, listening.sockets[0].getsockname()[1])
    async with proxy(gone) as link:
        reader, writer = await asyncio.open_connection(LOOPBACK, link.port)
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        await writer.wait_closed()
