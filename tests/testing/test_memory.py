"""Two ends in memory carrying messages both ways (testing/memory.py)."""

from __future__ import annotations

import asyncio

import pytest
from websockets.exceptions import ConnectionClosedError, ConnectionClosedOK

from fanout.relay.core.relaycore import UPSTREAM, RelayCore
from fanout.testing.batches import batch, rows
from fanout.testing.memory import MemoryEnd, memory_pair
from fanout.testing.relaycore import frames_to, ready_core
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.columns import decode_columns
from fanout.wire.messages import Acquire, Frame, Push, Subscribe, Subscribed


async def test_what_one_end_sends_the_other_receives_in_order_both_ways() -> None:
    a, b = memory_pair()
    await a.send(b"one")
    await a.send("two")
    await b.send(b"back")
    assert [await b.recv(), await b.recv(), await a.recv()] == [b"one", "two", b"back"]
    assert (a.sent, a.received, b.sent, b.received) == (2, 1, 1, 2)


async def test_a_full_direction_makes_the_sender_wait_for_the_reader() -> None:
    a, b = memory_pair(limit=2)
    a.send_nowait(b"1")
    a.send_nowait(b"2")
    with pytest.raises(asyncio.QueueFull):
        a.send_nowait(b"3")
    blocked = asyncio.create_task(a.send(b"3"))
    await asyncio.sleep(0.01)
    assert not blocked.done()
    assert b.pending == 2
    assert await b.recv() == b"1"
    await asyncio.wait_for(blocked, 1)
    assert [await b.recv(), await b.recv()] == [b"2", b"3"]
    await b.send(b"the other way is not full")


async def test_a_close_comes_after_what_was_sent_before_it() -> None:
    a, b = memory_pair()
    await a.send(b"last words")
    await a.close()
    assert [message async for message in b] == [b"last words"]
    with pytest.raises(ConnectionClosedOK):
        await b.recv()
    with pytest.raises(ConnectionClosedOK):
        await b.send(b"too late")
    with pytest.raises(ConnectionClosedOK):
        await a.send(b"too late")
    assert (a.close_code, b.close_code) == (1000, 1000)


async def test_an_abnormal_close_raises_the_error_and_wakes_a_waiting_reader() -> None:
    a, b = memory_pair()
    reading = asyncio.create_task(b.recv())
    await asyncio.sleep(0.01)
    await b.close(1008, "slow consumer")
    with pytest.raises(ConnectionClosedError) as closed:
        await reading
    assert closed.value.sent is not None  # b closed it
    assert (closed.value.sent.code, closed.value.sent.reason) == (1008, "slow consumer")
    with pytest.raises(ConnectionClosedError) as seen:
        await a.recv()
    assert seen.value.rcvd is not None  # a was told
    assert (a.close_code, a.close_reason) == (1008, "slow consumer")
    await a.close()  # a second close does nothing
    assert a.close_code == 1008


async def test_a_close_wakes_a_sender_waiting_for_room() -> None:
    a, b = memory_pair(limit=1)
    a.send_nowait(b"fills it")
    sending = asyncio.create_task(a.send(b"waits"))
    await asyncio.sleep(0.01)
    await b.close()
    with pytest.raises(ConnectionClosedOK):
        await sending


async def serve(core: RelayCore, client: MemoryEnd, upstream: list[Frame]) -> None:
    """The relay's side of one subscriber connection, without its shell: frames in, the
    core's answers out, what it asks of its publisher kept in ``upstream``."""
    decoder = codec.to_relay()
    async for data in client:
        request = decoder.decode(data)
        assert isinstance(request, Subscribe)
        sends = core.on_subscribe(1, request)
        upstream += frames_to(sends, UPSTREAM)
        for send in sends:
            if send.to == 1:
                await client.send(send.data())


async def test_a_whole_subscription_runs_between_a_core_and_a_subscriber_in_memory() -> None:
    core = ready_core()
    subscriber, relay_side = memory_pair(names=("subscriber", "relay"))
    upstream: list[Frame] = []
    serving = asyncio.create_task(serve(core, relay_side, upstream))
    decoder = codec.to_subscriber()

    await subscriber.send(codec.encode(Subscribe(1, "agents", Box((0, 0), (10, 10)), rate=1e3)))
    assert isinstance(decoder.decode(await subscriber.recv()), Subscribed)
    (acquire,) = upstream
    assert isinstance(acquire, Acquire)
    core.on_batch(batch(0, rows(k1=(1, 1), k2=(50, 50)), snapshots=[acquire.prim]))
    for send in core.pushes(100.0, lambda client: True):
        await relay_side.send(send.data())
    push = decoder.decode(await subscriber.recv())
    assert isinstance(push, Push)
    assert push.full
    assert decode_columns(push.entered)["id"].tolist() == [1]

    await subscriber.close()
    await asyncio.wait_for(serving, 1)  # the relay's side saw the close and ended
