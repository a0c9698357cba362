"""The TCP proxy (testing/proxy.py): bytes go through both ways; a cut closes both ends of each
connection and the next goes through again; a partition holds bytes one way or both (and new
connections) until healed, or only the connections of one process isolated; a slowed link
delays and paces them."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

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


async def test_a_partition_holds_bytes_one_way_and_a_heal_lets_them_through() -> None:
    async with await asyncio.start_server(echo, LOOPBACK, 0) as listening:
        target = (LOOPBACK, listening.sockets[0].getsockname()[1])
        async with proxy(target) as link:
            reader, writer = await asyncio.open_connection(LOOPBACK, link.port)
            writer.write(b"one")
            assert await reader.readexactly(3) == b"one"
            link.partition("down")  # the echo comes back no more; what is sent still goes up
            writer.write(b"two")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(reader.readexactly(3), 0.5)
            assert link.down.waiting == 3 and link.up.waiting == 0
            link.heal()
            assert await asyncio.wait_for(reader.readexactly(3), 5) == b"two"
            assert link.waiting == 0
            writer.close()
            await writer.wait_closed()


async def test_a_connection_opened_across_a_partition_hangs_until_healed() -> None:
    async with await asyncio.start_server(echo, LOOPBACK, 0) as listening:
        target = (LOOPBACK, listening.sockets[0].getsockname()[1])
        async with proxy(target) as link:
            link.partition()
            reader, writer = await asyncio.open_connection(LOOPBACK, link.port)
            writer.write(b"hello")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(reader.readexactly(5), 0.5)
            link.heal()
            assert await asyncio.wait_for(reader.readexactly(5), 5) == b"hello"
            assert link.cut() == 2  # and a cut still ends it at both ends
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            await writer.wait_closed()


#: A client process: one byte through the proxy and its echo, then another on a line of stdin.
CLIENT = """
import socket, sys
link = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
for byte in (b"x", b"y"):
    sys.stdin.readline()
    link.sendall(byte)
    print(link.recv(1).decode(), flush=True)
"""


async def test_an_isolated_process_loses_the_link_while_others_keep_it() -> None:
    async with await asyncio.start_server(echo, LOOPBACK, 0) as listening:
        target = (LOOPBACK, listening.sockets[0].getsockname()[1])
        async with proxy(target) as link:
            client = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                CLIENT,
                str(link.port),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            assert client.stdin is not None and client.stdout is not None
            try:
                client.stdin.write(b"\n")
                assert await asyncio.wait_for(client.stdout.readline(), 10) == b"x\n"
                link.isolate(client.pid)
                reader, writer = await asyncio.open_connection(LOOPBACK, link.port)
                writer.write(b"mine")  # opened by this process: not isolated
                assert await asyncio.wait_for(reader.readexactly(4), 5) == b"mine"
                client.stdin.write(b"\n")
                line = asyncio.ensure_future(client.stdout.readline())
                done, _ = await asyncio.wait({line}, timeout=0.5)
                assert not done and link.up.waiting == 1, "the isolated process's byte went up"
                link.heal()
                assert await asyncio.wait_for(line, 5) == b"y\n"
                writer.close()
                await writer.wait_closed()
            finally:
                if client.returncode is None:
                    client.kill()
                await client.wait()


async def test_a_slowed_link_delays_each_chunk_and_paces_it_to_its_rate() -> None:
    async with await asyncio.start_server(echo, LOOPBACK, 0) as listening:
        target = (LOOPBACK, listening.sockets[0].getsockname()[1])
        async with proxy(target) as link:
            reader, writer = await asyncio.open_connection(LOOPBACK, link.port)
            link.slow(delay=0.2, way="up")
            started = time.monotonic()
            writer.write(b"ping")
            assert await asyncio.wait_for(reader.readexactly(4), 5) == b"ping"
            assert time.monotonic() - started >= 0.2  # a lower bound: never flaky
            link.slow(rate=100_000, way="down")
            started = time.monotonic()
            writer.write(bytes(50_000))
            assert len(await asyncio.wait_for(reader.readexactly(50_000), 10)) == 50_000
            assert time.monotonic() - started >= 0.3  # 50 kB at 100 kB/s, less one chunk
            link.heal()
            with pytest.raises(ValueError, match="rate > 0"):
                link.slow(rate=0)
            writer.close()
            await writer.wait_closed()
