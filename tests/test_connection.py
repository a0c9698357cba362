"""A connection's outbound side over a real WebSocket on loopback: frames written at once while
the peer keeps up, busy while the kernel holds unsent bytes, in order either way."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from hypothesis import given
from hypothesis import strategies as st
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame, Opcode

from fanout.connection import _PING_DATA, _PING_HEADER, Outbound, binary_frame, dial, greet
from fanout.testing.wait import eventually


@asynccontextmanager
async def pair(write_limit: int = 0) -> AsyncIterator[tuple[ServerConnection, ClientConnection]]:
    """A server-side connection (the one under test) and the client reading it."""
    accepted: asyncio.Queue[ServerConnection] = asyncio.Queue()
    done = asyncio.Event()

    async def handler(websocket: ServerConnection) -> None:
        await accepted.put(websocket)
        await done.wait()

    async with serve(
        handler, "127.0.0.1", 0, write_limit=write_limit, max_size=None, compression=None
    ) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        try:
            async with connect(
                f"ws://127.0.0.1:{port}", max_size=None, max_queue=1, compression=None
            ) as client:
                server_side = await accepted.get()
                # Small kernel buffers, so a few MiB cannot all be taken while nobody reads.
                for side, option in ((server_side, socket.SO_SNDBUF), (client, socket.SO_RCVBUF)):
                    sock = side.transport.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, option, 65_536)
                yield server_side, client
        finally:
            done.set()


async def test_a_frame_to_a_connection_with_nothing_pending_is_written_at_once() -> None:
    async with pair() as (server_side, client):
        idled: list[bool] = []
        async with Outbound(server_side, limit=8, on_idle=lambda: idled.append(True)) as outbound:
            assert outbound.offer(b"one")
            # Written by offer itself: nothing queued, the writer task did not run yet.
            assert outbound.sent == 1 and outbound.pending == 0 and outbound.idle
            assert await client.recv() == b"one"


@given(size=st.one_of(st.integers(0, 300), st.sampled_from([125, 126, 127, 65535, 65536, 70000])))
def test_a_binary_frame_is_framed_as_websockets_frames_it(size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    expected = Frame(Opcode.BINARY, data).serialize(mask=False, extensions=[])
    assert binary_frame(data) == expected


async def test_probes_are_pings_the_peer_answers_each_acked_once_in_order() -> None:
    """Framed here (not by websockets' protocol object), as its own pings would be; a real
    websockets client answers each, and each probe is acked once, after the frames before it."""
    async with pair() as (server_side, client), Outbound(server_side, limit=8) as outbound:
        acked: list[tuple[int, float]] = []
        for n in range(3):
            assert outbound.offer(b"frame %d" % n)
            assert outbound.probe(lambda at, n=n: acked.append((n, at)))
        assert len(server_side.pending_pings) == 3  # each its own data: none taken for another
        for n in range(3):
            assert await asyncio.wait_for(client.recv(), 5) == b"frame %d" % n
        await eventually(lambda: len(acked), lambda count: count == 3, timeout=5)
        assert [n for n, _ in acked] == [0, 1, 2] and not server_side.pending_pings


async def test_a_probed_frame_and_its_ping_go_out_in_one_write_and_its_pong_acks_it() -> None:
    async with pair() as (server_side, client), Outbound(server_side, limit=8) as outbound:
        writes: list[bytes] = []
        transport, write = server_side.transport, server_side.transport.write
        transport.write = lambda data: (writes.append(bytes(data)), write(data))[1]  # type: ignore[method-assign]
        acked: list[float] = []
        assert outbound.offer_probed(b"frame", acked.append)
        (ping,) = server_side.pending_pings
        assert writes == [binary_frame(b"frame") + _PING_HEADER + ping]
        assert await asyncio.wait_for(client.recv(), 5) == b"frame"
        await eventually(lambda: acked, what="the pong")
        assert len(acked) == 1 and not server_side.pending_pings


async def test_a_probed_frame_that_must_wait_is_queued_and_its_ping_goes_at_once() -> None:
    """Behind a draining push the frame waits its turn; the ping marks what was written."""
    big = bytes(4 << 20)
    async with pair() as (server_side, client), stalled(server_side, big, limit=4) as outbound:
        acked: list[float] = []
        assert outbound.offer_probed(b"after", acked.append)
        assert outbound.pending == 2 and len(server_side.pending_pings) == 1  # the drain, it
        assert [await client.recv() for _ in range(3)] == [b"first", big, b"after"]
        await eventually(lambda: acked, what="the pong")


async def test_a_probe_whose_connection_ends_before_its_pong_is_never_acked() -> None:
    big = bytes(4 << 20)  # the client has stopped reading: no pong comes
    async with pair() as (server_side, _client), stalled(server_side, big, limit=4) as outbound:
        acked: list[float] = []
        assert outbound.offer_probed(b"after", acked.append)
        server_side.transport.abort()  # websockets ends the pings in flight
        await asyncio.wait_for(server_side.wait_closed(), 10)
        assert not acked and not server_side.pending_pings


async def test_an_ack_that_fails_is_logged_and_the_connection_reads_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with pair() as (server_side, client), Outbound(server_side, limit=8) as outbound:

        def broken(at: float) -> None:
            raise ValueError("a bug in the bookkeeping")

        assert outbound.offer_probed(b"frame", broken)
        assert await asyncio.wait_for(client.recv(), 5) == b"frame"
        await eventually(lambda: "a probe's ack failed" in caplog.text, what="the log line")
        acked: list[float] = []
        assert outbound.offer_probed(b"next", acked.append)  # still open, still acked
        assert await asyncio.wait_for(client.recv(), 5) == b"next"
        await eventually(lambda: acked, what="the pong")


def test_a_probe_is_framed_as_websockets_frames_a_ping() -> None:
    data = _PING_DATA(7)
    assert _PING_HEADER + data == Frame(Opcode.PING, data).serialize(mask=False, extensions=[])


async def test_frames_of_every_header_size_reach_the_peer_whole() -> None:
    async with pair() as (server_side, client), Outbound(server_side, limit=8) as outbound:
        for size in (0, 125, 126, 65535, 65536, 300_000):
            data = bytes(range(256)) * (size // 256) + bytes(size % 256)
            assert outbound.offer(data)
            assert await asyncio.wait_for(client.recv(), 5) == data
        server_side.protocol.send_binary(b"by websockets")  # in step with the frames before
        server_side.send_data()
        assert await asyncio.wait_for(client.recv(), 5) == b"by websockets"


async def test_a_peer_that_does_not_read_leaves_the_connection_busy_until_it_drains() -> None:
    big = bytes(range(256)) * 16_384  # 4 MiB: more than the kernel's socket buffers take
    async with pair() as (server_side, client):
        idled: list[bool] = []
        async with Outbound(server_side, limit=8, on_idle=lambda: idled.append(True)) as outbound:
            # The client's queue holds one message: once it has this one it stops reading.
            assert outbound.offer(b"first")
            await asyncio.sleep(0.2)
            assert outbound.offer(big)
            assert not outbound.idle  # the kernel left bytes in the transport
            assert outbound.offer(b"after")  # queued behind them, not written past them
            assert outbound.pending >= 1
            assert await client.recv() == b"first"
            assert await client.recv() == big
            assert await client.recv() == b"after"
            # drained: the core hears it may push again
            await eventually(lambda: outbound.idle and idled, what="the outbound queue drained")
            assert outbound.sent == 3


async def test_a_full_queue_closes_the_connection_as_a_slow_consumer() -> None:
    big = bytes(4 << 20)
    async with pair() as (server_side, client), Outbound(server_side, limit=2) as outbound:
        assert outbound.offer(b"first")
        await asyncio.sleep(0.2)  # the client has it and stops reading
        assert outbound.offer(big)  # the kernel takes part: it counts as one frame waiting
        assert outbound.offer(b"a")
        assert not outbound.offer(b"b")
        assert outbound.overflowed
        assert await client.recv() == b"first"
        assert await client.recv() == big  # then the close frame, with its reason
        await asyncio.wait_for(server_side.wait_closed(), 10)
        assert server_side.close_code == 1008
        assert "slow consumer" in (server_side.close_reason or "")


@asynccontextmanager
async def stalled(
    server_side: ServerConnection, big: bytes, **limits: int
) -> AsyncIterator[Outbound]:
    """An outbound, its block open, whose client took ``b"first"`` and stopped reading, with
    ``big`` (more than the kernel takes) draining: one frame waiting."""
    async with Outbound(server_side, **limits) as outbound:
        assert outbound.offer(b"first")
        await asyncio.sleep(0.2)  # the client has it and stops reading
        assert outbound.offer(big)  # the kernel takes part: one frame waiting
        yield outbound


async def test_control_frames_have_room_of_their_own_and_keep_their_place() -> None:
    """Answers and notices queued behind a draining push do not make a slow consumer until
    ``limit + control`` frames wait; order is kept."""
    big = bytes(4 << 20)
    async with (
        pair() as (server_side, client),
        stalled(server_side, big, limit=2, control=5) as outbound,
    ):
        assert outbound.offer(b"push")  # the second of limit=2
        controls = [f"control {n}".encode() for n in range(5)]
        for control in controls:  # past limit, within limit + control
            assert outbound.offer(control, control=True)
        assert not outbound.overflowed
        received = [await client.recv() for _ in range(3 + len(controls))]
        assert received == [b"first", big, b"push", *controls]


@pytest.mark.parametrize("last_is_control", [False, True])
async def test_pushes_past_limit_or_frames_past_limit_and_control_close_it(
    last_is_control: bool,
) -> None:
    big = bytes(4 << 20)
    async with (
        pair() as (server_side, client),
        stalled(server_side, big, limit=2, control=2) as outbound,
    ):
        assert outbound.offer(b"a", control=True)
        assert outbound.offer(b"b", control=True)
        if last_is_control:
            assert outbound.offer(b"push")  # the second of limit=2
            assert not outbound.offer(b"c", control=True)  # limit + control = 4 waiting
        else:
            assert outbound.offer(b"push")
            assert not outbound.offer(b"another push")  # pushes are bounded by limit
        assert outbound.overflowed
        assert outbound.closed_for == "slow consumer: 4 frames waiting to be sent"
        assert await client.recv() == b"first"
        assert await client.recv() == big  # then the close frame: the handshake ends at once


async def test_closing_twice_closes_once_with_the_first_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with pair() as (server_side, client):
        async with Outbound(server_side, limit=2) as outbound:
            outbound.close("slow consumer: a push unread for 11 s")
            outbound.close("slow consumer: a push unread for 12 s")  # the next housekeeping
            with pytest.raises(ConnectionClosed):
                await client.recv()
        # Leaving the block waited for the closing handshake it started.
        assert server_side.close_code == 1008
        assert server_side.close_reason == "slow consumer: a push unread for 11 s"
        assert outbound.closed_for == "slow consumer: a push unread for 11 s"
        assert caplog.text.count("closing") == 1


async def test_dial_raises_connection_error_when_the_handshake_is_broken_off() -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        with pytest.raises(ConnectionError, match="opening handshake failed"):
            async with dial(f"ws://127.0.0.1:{port}", open_timeout=5):
                pass


async def test_greet_raises_connection_error_when_the_peer_closes_before_answering() -> None:
    async def hang_up(websocket: ServerConnection) -> None:
        await websocket.recv()
        websocket.transport.abort()

    async with serve(hang_up, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        async with dial(f"ws://127.0.0.1:{port}") as websocket:
            with pytest.raises(ConnectionError, match="before the handshake's answer"):
                await greet(websocket, b"hello", "the peer")
