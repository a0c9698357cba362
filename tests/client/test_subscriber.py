"""A view applies every push to its rows in order; notices may drop, rows never do: driven
through the client core (frames in, events out), and through a real socket."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import msgspec
import numpy as np
import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from fanout.client.core import ClientCore, Ended, Event, Held, Updated
from fanout.client.subscriber import LiveView, Subscriber, SubscriptionError, connect
from fanout.client.viewstate import Asked
from fanout.errors import ProtocolError
from fanout.testing.wait import eventually
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.columns import decode_columns, encode_columns
from fanout.wire.messages import (
    PROTOCOL_VERSION,
    Hello,
    Mode,
    NoUpdate,
    Push,
    Subscribe,
    Subscribed,
    Welcome,
)


def held(buffer: int = 256, mode: Mode = "latest") -> tuple[ClientCore, LiveView]:
    """A core holding subscription 1, and the view a connection would give the program."""
    core = ClientCore(buffer)
    request = core.subscribe(Asked("agents", Box((0, 0), (1, 1)), mode=mode))
    assert core.receive(Subscribed(request.sub, "id", ["id", "x"]), 0.0) == [Held(1)]
    return core, LiveView(core.view(1), cast(Subscriber, None))


def feed(core: ClientCore, live: LiveView, frame: object) -> list[Event]:
    """What the connection's reader does with a frame: the core's events, the view woken."""
    events = core.receive(frame, 0.0)
    live.wake()
    return events


def push(
    seq: int,
    full: bool = False,
    entered: dict[str, Any] | None = None,
    updated: dict[str, Any] | None = None,
    left: list[int] | None = None,
) -> Push:
    return Push(
        sub=1,
        epoch=1,
        seq=seq,
        tick=seq * 10,
        tick_time=0.0,
        full=full,
        entered=encode_columns(entered or {}),
        updated=encode_columns(updated or {}),
        left=encode_columns({"id": np.array(left or [], dtype=np.int64)}),
    )


async def test_pushes_apply_in_order_to_the_rows() -> None:
    core, live = held()
    core.receive(push(0, full=True, entered={"id": [1, 2], "x": [0.1, 0.2]}), 0.0)
    updated = {"id": [1], "x": [0.5]}
    core.receive(push(1, entered={"id": [3], "x": [0.3]}, updated=updated, left=[2]), 0.0)
    assert live.rows == {1: {"id": 1, "x": 0.5}, 3: {"id": 3, "x": 0.3}}
    assert (live.seq, live.tick) == (1, 10)
    core.receive(push(2, full=True, entered={"id": [9], "x": [0.9]}), 0.0)
    assert list(live.rows) == [9]  # a full push replaces everything


async def test_a_no_update_changes_nothing_but_the_tick() -> None:
    core, live = held()
    core.receive(push(0, full=True, entered={"id": [1], "x": [0.1]}), 0.0)
    (event,) = core.receive(NoUpdate(1, 1, 5, 50), 12.5)
    assert isinstance(event, Updated)
    assert event.update.no_update and event.update.received_at == 12.5
    assert live.rows == {1: {"id": 1, "x": 0.1}}
    assert live.tick == 50


async def test_a_lagging_reader_loses_notices_not_rows() -> None:
    core, live = held(buffer=2)
    for seq in range(5):
        feed(core, live, push(seq, entered={"id": [seq], "x": [float(seq)]}))
    assert live.dropped == 3
    assert sorted(live.rows) == [0, 1, 2, 3, 4]
    iterator = live.__aiter__()
    assert (await iterator.__anext__()).seq == 3


async def test_wait_updates_returns_after_that_many_more() -> None:
    core, live = held()
    waiting = asyncio.create_task(live.wait_updates(2))
    await asyncio.sleep(0)  # let it register
    feed(core, live, push(0, full=True))
    await asyncio.sleep(0)
    assert not waiting.done()
    feed(core, live, push(1))
    await asyncio.wait_for(waiting, 1)


async def test_an_ended_subscription_raises_to_iterators_and_waiters() -> None:
    core, live = held()
    waiting = asyncio.create_task(live.wait_updates(1))
    iterating = asyncio.create_task(live.__aiter__().__anext__())
    await asyncio.sleep(0)
    (ended,) = core.fail(SubscriptionError("closed", "gone"))
    assert isinstance(ended, Ended) and ended.state is live.state
    live.wake()
    with pytest.raises(SubscriptionError, match="closed: gone"):
        await waiting
    with pytest.raises(SubscriptionError, match="closed: gone"):
        await iterating
    assert live.closed


async def test_an_every_view_keeps_every_notice_and_counts_breaks_in_the_sequence() -> None:
    core, live = held(buffer=2, mode="every")
    core.receive(push(0, full=True, entered={"id": [1], "x": [0.1]}), 0.0)
    for seq in range(1, 5):
        core.receive(NoUpdate(1, 1, seq, 10 * seq), 0.0)
    assert live.dropped == 0  # never dropped in mode every: the program sees every seq
    assert live.gaps == 0
    core.receive(push(7, updated={"id": [1], "x": [0.7]}), 0.0)
    assert live.gaps == 1
    iterator = live.__aiter__()
    assert [(await iterator.__anext__()).seq for _ in range(6)] == [0, 1, 2, 3, 4, 7]


def test_a_token_names_the_seq_and_the_keys_held() -> None:
    core, live = held()
    core.receive(push(3, full=True, entered={"id": [5, 2], "x": [0.5, 0.2]}), 0.0)
    token = live.token()
    assert (token.epoch, token.seq) == (1, 3)
    assert decode_columns(token.keys)["id"].tolist() == [2, 5]


@pytest.mark.parametrize(
    ("section", "payload"),
    [
        ("entered", {"entered": {"x": [0.1]}}),
        ("updated", {"updated": {"x": [0.1, 0.2]}}),
    ],
)
def test_rows_without_the_key_are_a_protocol_error_and_change_nothing(
    section: str, payload: dict[str, dict[str, list[float]]]
) -> None:
    core, live = held()
    core.receive(push(0, full=True, entered={"id": [1], "x": [0.1]}), 0.0)
    with pytest.raises(ProtocolError, match=f"{section} rows without the key column 'id'"):
        core.receive(push(1, full=True, **payload), 0.0)
    assert live.rows == {1: {"id": 1, "x": 0.1}}
    assert live.seq == 0


def test_left_rows_without_the_key_are_a_protocol_error() -> None:
    core, live = held()
    core.receive(push(0, full=True, entered={"id": [1], "x": [0.1]}), 0.0)
    bad = msgspec.structs.replace(push(1), left=encode_columns({"x": [1.0]}))
    with pytest.raises(ProtocolError, match="left: 1 rows without the key column 'id'"):
        core.receive(bad, 0.0)
    assert live.rows == {1: {"id": 1, "x": 0.1}}


async def test_a_relay_that_sends_rows_without_keys_ends_the_views_with_an_error() -> None:
    closed: list[int | None] = []

    async def relay(websocket: ServerConnection) -> None:  # a real socket, a broken relay
        decode = codec.to_relay().decode
        assert isinstance(decode(await websocket.recv()), Hello)
        await websocket.send(codec.encode(Welcome(PROTOCOL_VERSION, "broken", "s")))
        subscribe = decode(await websocket.recv())
        assert isinstance(subscribe, Subscribe)
        await websocket.send(codec.encode(Subscribed(subscribe.sub, "id", ["id", "x"])))
        bad = msgspec.structs.replace(push(0, full=True, entered={"x": [0.1]}), sub=subscribe.sub)
        await websocket.send(codec.encode(bad))
        await websocket.wait_closed()
        closed.append(websocket.close_code)

    async with serve(relay, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}") as subscriber:
            live = await subscriber.subscribe(Box((0, 0), (1, 1)))
            with pytest.raises(SubscriptionError, match=r"protocol: .*without the key column"):
                await asyncio.wait_for(live.__aiter__().__anext__(), 5)
            with pytest.raises(SubscriptionError, match=r"protocol: .*without the key column"):
                await asyncio.wait_for(subscriber.subscribe(Box((0, 0), (1, 1))), 5)
    assert closed == [1002]  # the relay was told: protocol error


async def test_a_subscription_asked_as_the_connection_closes_raises_its_failure() -> None:
    """The relay's close not yet read (a loaded client), a subscription's send fails: the
    caller gets the connection's ``SubscriptionError``, as ``subscribe`` says, not websockets'
    exception (which ended every move of a split under load)."""

    async def relay(websocket: ServerConnection) -> None:
        decode = codec.to_relay().decode
        assert isinstance(decode(await websocket.recv()), Hello)
        await websocket.send(codec.encode(Welcome(PROTOCOL_VERSION, "closing", "s")))
        await websocket.wait_closed()

    async def closed(message: bytes) -> None:  # the send of a connection closed meanwhile
        raise ConnectionClosed(None, None)

    async with serve(relay, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}") as subscriber:
            subscriber._websocket.send = closed  # type: ignore[method-assign,assignment]
            with pytest.raises(SubscriptionError, match=r"closed: connection to the relay"):
                await asyncio.wait_for(subscriber.subscribe(Box((0, 0), (1, 1))), 5)


async def test_a_resumed_view_first_yields_what_the_old_one_received_but_had_not_yielded() -> None:
    # The relay's pushes 1..3 reach the old view while nothing iterates it (here: before the
    # program reads on; in the soak: while its connection closes). The token says seq 3, so
    # the relay resumes after 3: the new view must yield 1..3 itself, or they are lost.
    resumed_at: list[int] = []

    async def relay(websocket: ServerConnection) -> None:
        decode = codec.to_relay().decode
        assert isinstance(decode(await websocket.recv()), Hello)
        await websocket.send(codec.encode(Welcome(PROTOCOL_VERSION, "relay", "s")))
        subscribe = decode(await websocket.recv())
        assert isinstance(subscribe, Subscribe)
        await websocket.send(codec.encode(Subscribed(subscribe.sub, "id", ["id", "x"])))
        if subscribe.resume is None:
            pushes = [push(0, full=True, entered={"id": [1], "x": [0.1]})]
            pushes += [push(seq, updated={"id": [1], "x": [seq / 10]}) for seq in (1, 2, 3)]
        else:
            resumed_at.append(subscribe.resume.seq)
            pushes = [push(subscribe.resume.seq + 1, updated={"id": [1], "x": [0.9]})]
        for frame in pushes:
            await websocket.send(codec.encode(msgspec.structs.replace(frame, sub=subscribe.sub)))
        await websocket.wait_closed()

    async with serve(relay, "127.0.0.1", 0) as server:
        url = f"ws://127.0.0.1:{next(iter(server.sockets)).getsockname()[1]}"
        box = Box((0, 0), (1, 1))
        async with connect(url) as first:
            old = await first.subscribe(box, mode="every")
            assert (await asyncio.wait_for(old.__aiter__().__anext__(), 5)).seq == 0
            await eventually(lambda: old.seq, lambda seq: seq == 3, timeout=5, every=0.01)
            # 1..3 are applied to the rows, and not yielded
        async with connect(url) as second:
            new = await second.subscribe(box, mode="every", resume=old)
            iterator = new.__aiter__()
            seqs = [(await asyncio.wait_for(iterator.__anext__(), 5)).seq for _ in range(4)]
    assert resumed_at == [3]
    assert seqs == [1, 2, 3, 4]
    assert new.rows == {1: {"id": 1, "x": 0.9}} and new.gaps == 0
