"""The scripted publisher (testing/publisher.py), spoken to over a real socket by a model relay
written against the protocol."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.wait import eventually
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.columns import decode_columns
from fanout.wire.messages import (
    PROTOCOL_VERSION,
    Acquire,
    Batch,
    Catalog,
    DatasetInfo,
    Error,
    Frame,
    Hello,
    Release,
    Welcome,
)

AGENTS = DatasetInfo("agents", "id", {"id": "<i8", "x": "<f8", "y": "<f8"}, "space", ["x", "y"])
TOPICS = DatasetInfo("topics", "topic", {"topic": "str", "v": "<f8"}, "topic", ["topic"])


async def hello(url: str) -> tuple[ClientConnection, Catalog]:
    """Connect as a relay; the catalog the publisher sent."""
    relay = await connect(url)
    await relay.send(codec.encode(Hello(PROTOCOL_VERSION, "relay", "model")))
    assert isinstance(await receive(relay), Welcome)
    catalog = await receive(relay)
    assert isinstance(catalog, Catalog)
    return relay, catalog


async def receive(relay: ClientConnection) -> object:
    return codec.from_publisher().decode(await asyncio.wait_for(relay.recv(), 5))


@pytest.fixture
async def relay_of() -> AsyncIterator[tuple[ScriptedPublisher, ClientConnection]]:
    publisher = ScriptedPublisher(Catalog([AGENTS, TOPICS]))
    async with serving(publisher) as url:
        relay, catalog = await hello(url)
        assert catalog == Catalog([AGENTS, TOPICS])
        async with relay:
            yield publisher, relay


async def test_acquires_are_held_queued_and_fresh_until_taken(relay_of) -> None:
    publisher, relay = relay_of
    first, second = (
        Acquire(1, "agents", Box((0, 0), (1, 1))),
        Acquire(2, "agents", Box((2, 2), (3, 3))),
    )
    await relay.send(codec.encode(first))
    await relay.send(codec.encode(second))
    assert await publisher.next_acquire() == first
    assert await publisher.next_acquire() == second
    assert publisher.held == {1: first, 2: second}
    await relay.send(codec.encode(Release(1)))
    await eventually(lambda: 1 not in publisher.held)
    assert publisher.take_fresh() == [2]  # a primitive released before a batch needs no snapshot
    assert publisher.take_fresh() == []
    with pytest.raises(TimeoutError):
        await publisher.next_acquire(timeout=0.05)


async def test_batches_are_numbered_per_dataset_and_carry_what_they_are_given(relay_of) -> None:
    publisher, relay = relay_of
    sent = await publisher.send({"id": [1, 2], "x": [1.0, 2.0], "y": [1.0, 2.0]}, snapshots=[7])
    got = await receive(relay)
    assert got == sent
    assert isinstance(got, Batch)
    assert (got.dataset, got.epoch, got.seq, got.tick, got.snapshots) == ("agents", 1, 0, 0, [7])
    assert decode_columns(got.upserts)["id"].tolist() == [1, 2]
    assert decode_columns(got.deletes)["id"].dtype == np.int64  # the key's dtype, even empty
    await publisher.send(deletes=[2], tick=40, tick_time=12.5)
    got = await receive(relay)
    assert isinstance(got, Batch)
    assert (got.seq, got.tick, got.tick_time, got.upserts.length) == (1, 40, 12.5, 0)
    assert decode_columns(got.deletes)["id"].tolist() == [2]
    await publisher.send({"topic": ["a/b"], "v": [1.0]}, deletes=["a/c"], dataset="topics")
    got = await receive(relay)
    assert isinstance(got, Batch)
    assert (got.dataset, got.seq) == ("topics", 0)
    assert decode_columns(got.deletes)["topic"].tolist() == ["a/c"]
    assert publisher.next_seq == {"agents": 2, "topics": 1}
    with pytest.raises(ValueError, match="no dataset 'nope'"):
        await publisher.send(dataset="nope")


async def test_any_frame_can_be_sent_to_every_relay(relay_of) -> None:
    publisher, relay = relay_of
    refusal = Error("invalid_view", "gone", ref=3)
    assert await publisher.broadcast(refusal) == 1
    assert await receive(relay) == refusal


async def test_each_connection_gets_the_next_catalog_and_the_last_one_stays() -> None:
    catalogs = [Catalog([TOPICS]), Catalog([AGENTS])]
    publisher = ScriptedPublisher(catalogs)
    async with serving(publisher) as url:
        seen = []
        for _ in range(3):
            relay, catalog = await hello(url)
            seen.append(catalog)
            await relay.close()
        assert seen == [Catalog([TOPICS]), Catalog([AGENTS]), Catalog([AGENTS])]
        assert publisher.connections == 3
        await eventually(lambda: not publisher.relays)  # closed ones are dropped
        assert await publisher.broadcast(Error("x", "y")) == 0


async def test_frames_go_to_on_frame_when_given() -> None:
    frames: list[Frame] = []
    publisher = ScriptedPublisher(Catalog([AGENTS]), on_frame=frames.append)
    async with serving(publisher) as url:
        relay, _ = await hello(url)
        acquire = Acquire(1, "agents", Box((0, 0), (1, 1)))
        await relay.send(codec.encode(acquire))
        await relay.send(codec.encode(Release(1)))
        await eventually(lambda: len(frames) == 2)
        assert frames == [acquire, Release(1)]
        assert publisher.held == {}
        with pytest.raises(TimeoutError):  # not queued as well
            await publisher.next_acquire(timeout=0.05)
        await relay.close()


async def test_a_connection_that_does_not_say_hello_is_closed() -> None:
    publisher = ScriptedPublisher(Catalog([AGENTS]))
    async with serving(publisher) as url, connect(url) as stranger:
        await stranger.send(codec.encode(Release(1)))
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(stranger.recv(), 5)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1002
        assert publisher.connections == 0


def test_a_publisher_needs_a_catalog() -> None:
    with pytest.raises(ValueError, match="needs a catalog"):
        ScriptedPublisher([])
