"""The publisher's control plane over real sockets, with a fake set of datasets (no Spark).

The datasets behind it are a small in-memory stand-in; the control plane, the registry and the
sockets are the real ones.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import numpy as np
import pyarrow as pa
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from fanout.auth import AuthConfig, issue
from fanout.errors import BadRequest, InvalidView
from fanout.metrics import Sample, scrape
from fanout.publisher.control import ControlPlane
from fanout.publisher.log import Gap, LogGap
from fanout.publisher.relaytable import Registry
from fanout.testing.batches import batch
from fanout.testing.catalog import AGENTS, sensors
from fanout.views import Box, View
from fanout.views.topic import TopicFilter
from fanout.views.topic import parse as topic
from fanout.wire import codec
from fanout.wire.columns import encode_columns
from fanout.wire.messages import (
    PROTOCOL_VERSION,
    Acquire,
    Batch,
    Catalog,
    Curious,
    DatasetInfo,
    DatasetState,
    Error,
    Hello,
    Horizon,
    Knowledge,
    LiveWrites,
    Publish,
    Published,
    ReadState,
    StateRows,
    Welcome,
    Written,
)

SENSORS = sensors()


class FakeDatasets:
    """One dataset; replays seqs 1..`logged`; slow replays to let live batches pile up."""

    def __init__(self) -> None:
        self.logged = 6
        self.replay_started = threading.Event()
        self.release_replay = threading.Event()
        self.published: list[tuple[str, dict[str, np.ndarray], list[object]]] = []

    def infos(self) -> list[DatasetInfo]:
        return [AGENTS, SENSORS]

    def check(self, name: str, view: View) -> View:
        if name == "sensors" and isinstance(view, TopicFilter):
            return view
        if name != "agents":
            raise InvalidView(f"unknown dataset {name!r}")
        if not isinstance(view, Box):
            raise InvalidView("boxes only here")
        return view

    def samples(self) -> list[Sample]:
        return [Sample("publisher_seq", "gauge", "Last seq.", 7, {"dataset": "agents"})]

    def publish(
        self, name: str, upserts: dict[str, np.ndarray], deletes: np.ndarray
    ) -> tuple[int, int]:
        self.published.append((name, upserts, deletes.tolist()))
        return 0, len(deletes) - 1

    def read(self, name: str, view: View, tick: int) -> tuple[int, pa.Table]:
        if tick == 666:
            raise OSError("No space left on device")  # a fault of the publisher's, not the reader's
        if tick > 100:
            raise BadRequest(f"tick {tick} is not where a micro-batch ended")
        return tick, pa.table({"id": [1], "x": [0.5], "y": [0.5]})

    def knowledge(self, name: str, epoch: int, req: int, first: int, last: int) -> list[Knowledge]:
        if first < 3:
            raise LogGap(name, epoch, [Gap(first, 2, "trimmed")], (3, self.logged))
        empty = encode_columns({})
        return [
            Knowledge(req, name, epoch, seq, seq, 0.0, empty, empty)
            for seq in range(first, last + 1)
        ]

    def replay(self, name: str, epoch: int, after: int) -> list[Batch]:
        if epoch == 666:
            raise OSError("the log's disk is gone")  # a fault of the publisher's
        if epoch != 1:
            raise BadRequest(f"epoch {epoch} is over")
        self.replay_started.set()
        self.release_replay.wait(10)
        return [batch(seq) for seq in range(after + 1, self.logged + 1)]


@pytest.fixture
async def control() -> AsyncIterator[tuple[ControlPlane, FakeDatasets, str]]:
    datasets = FakeDatasets()
    plane = ControlPlane(datasets, Registry())
    ready = asyncio.Event()
    task = asyncio.create_task(plane.serve("127.0.0.1", 0, ready=lambda _: ready.set()))
    await ready.wait()
    try:
        yield plane, datasets, f"ws://127.0.0.1:{plane.port}"
    finally:
        plane.stop()
        await task


async def hello(url: str, role: str = "relay", **fields: object) -> ClientConnection:
    websocket = await connect(url)
    await websocket.send(codec.encode(Hello(PROTOCOL_VERSION, role, **fields)))  # type: ignore[arg-type]
    assert isinstance(codec.from_publisher().decode(await websocket.recv()), Welcome)
    assert isinstance(codec.from_publisher().decode(await websocket.recv()), Catalog)
    return websocket


async def frames(websocket: ClientConnection, count: int) -> list[object]:
    return [
        codec.from_publisher().decode(await asyncio.wait_for(websocket.recv(), 10))
        for _ in range(count)
    ]


async def test_a_resuming_relay_gets_the_log_then_live_batches_without_gap_or_duplicate(
    control,
) -> None:
    plane, datasets, url = control
    relay = await hello(url, resume={"agents": (1, 3)})
    await asyncio.to_thread(datasets.replay_started.wait, 10)
    # live batches 6 (also in the log) and 7 arrive while the replay is still running
    plane.deliver({1: batch(6), 99: batch(6)})  # relay 99 is gone: skipped
    plane.deliver({1: batch(7)})
    datasets.release_replay.set()
    received = [frame.seq for frame in await frames(relay, 4)]  # type: ignore[attr-defined]
    assert received == [4, 5, 6, 7]
    await relay.close()


async def test_a_relay_from_another_epoch_is_told_to_resync(control) -> None:
    _, datasets, url = control
    datasets.release_replay.set()
    relay = await hello(url, resume={"agents": (0, 3)})
    (error,) = await frames(relay, 1)
    assert isinstance(error, Error)
    assert error.code == "resync"
    assert "epoch 0 is over" in error.message
    await relay.close()


async def test_acquire_is_checked_and_recorded(control) -> None:
    plane, _, url = control
    relay = await hello(url)
    await relay.send(codec.encode(Acquire(1, "nope", Box((0, 0), (1, 1)))))
    await relay.send(codec.encode(Acquire(2, "agents", Box((0, 0), (1, 1)))))
    await relay.send(codec.encode(Acquire(2, "agents", Box((0, 0), (1, 1)))))
    first, second = await frames(relay, 2)
    assert isinstance(first, Error) and first.ref == 1 and "unknown dataset" in first.message
    assert isinstance(second, Error) and second.ref == 2 and "already held" in second.message
    assert plane.registry.plan("agents").prims == {1: {2: Box((0, 0), (1, 1))}}
    await relay.close()


async def test_metrics_count_each_relays_frames_bytes_and_primitives(control) -> None:
    plane, _, url = control
    websocket = await connect(url)
    await websocket.send(codec.encode(Hello(PROTOCOL_VERSION, "relay", name="east")))
    received = [await websocket.recv(), await websocket.recv()]  # welcome, catalog
    await websocket.send(codec.encode(Acquire(1, "agents", Box((0, 0), (1, 1)))))
    await websocket.send(codec.encode(Acquire(2, "agents", Box((1, 1), (2, 2)))))
    for _ in range(500):  # the acquires are applied as they arrive; no reply to wait for
        if len(plane.registry.plan("agents").prims.get(1, {})) == 2:
            break
        await asyncio.sleep(0.01)
    plane.deliver({1: batch(1)})
    received.append(await websocket.recv())
    scraped = await asyncio.to_thread(scrape, url)
    relay = '{name="east",relay="1"}'
    assert scraped["fanout_publisher_relays"] == 1
    assert scraped[f"fanout_publisher_relay_primitives{relay}"] == 2
    assert scraped[f"fanout_publisher_relay_frames_sent_total{relay}"] == 3
    assert scraped[f"fanout_publisher_relay_bytes_sent_total{relay}"] == sum(map(len, received))
    assert scraped['fanout_publisher_seq{dataset="agents"}'] == 7  # the datasets' own
    await websocket.close()
    for _ in range(50):
        after = await asyncio.to_thread(scrape, url)
        if after["fanout_publisher_relays"] == 0:
            break
        await asyncio.sleep(0.1)
    assert f"fanout_publisher_relay_bytes_sent_total{relay}" not in after
    assert after["fanout_publisher_bytes_sent_total"] >= sum(map(len, received))


async def test_a_relays_horizon_holds_the_log_until_released(control) -> None:
    plane, _, url = control
    relay = await hello(url)
    await relay.send(codec.encode(Horizon("agents", 1, 12)))
    await relay.send(codec.encode(Horizon("agents", 1, 15)))
    await relay.send(codec.encode(Curious(9, "agents", 1, 3, 3)))  # frames are taken in order:
    await frames(relay, 1)  # once this is answered, the horizons were recorded
    assert plane.registry.floor() == {("agents", 1): 15}
    await relay.send(codec.encode(Horizon("agents", 1, -1)))
    await relay.send(codec.encode(Curious(10, "agents", 1, 3, 3)))
    await frames(relay, 1)
    assert plane.registry.floor() == {}
    await relay.close()


async def test_readers_read_and_cannot_acquire(control) -> None:
    _, _, url = control
    reader = await hello(url, role="reader")
    await reader.send(codec.encode(ReadState(7, "agents", Box((0, 0), (1, 1)), 5)))
    await reader.send(codec.encode(ReadState(8, "agents", Box((0, 0), (1, 1)), 500)))
    await reader.send(codec.encode(Acquire(1, "agents", Box((0, 0), (1, 1)))))
    replies = {
        getattr(f, "req", None) or getattr(f, "ref", None) or "role": f
        for f in await frames(reader, 3)
    }
    assert isinstance(replies[7], StateRows) and replies[7].tick == 5
    assert isinstance(replies[8], Error) and replies[8].code == "bad_request"
    assert isinstance(replies["role"], Error) and "only relays" in replies["role"].message
    await reader.close()


async def test_a_request_that_fails_in_the_publisher_is_answered_and_the_connection_lives(
    control, caplog: pytest.LogCaptureFixture
) -> None:
    _, _, url = control
    reader = await hello(url, role="reader")
    await reader.send(codec.encode(ReadState(9, "agents", Box((0, 0), (1, 1)), 666)))
    (failed,) = await frames(reader, 1)
    assert isinstance(failed, Error) and (failed.code, failed.ref) == ("internal", 9)
    assert "OSError: No space left on device" in failed.message
    assert "request 9 failed" in caplog.text
    await reader.send(codec.encode(ReadState(10, "agents", Box((0, 0), (1, 1)), 5)))
    (rows,) = await frames(reader, 1)
    assert isinstance(rows, StateRows) and rows.req == 10
    await reader.close()


async def test_a_replay_that_fails_in_the_publisher_closes_the_relays_connection(
    control, caplog: pytest.LogCaptureFixture
) -> None:
    plane, _, url = control
    relay = await hello(url, resume={"agents": (666, 3)})
    with pytest.raises(ConnectionClosed) as closed:
        await asyncio.wait_for(relay.recv(), 10)  # not left waiting for batches held back
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011  # internal error
    assert plane.registry.held() == {}
    for _ in range(1000):  # websockets logs the handler's error as it closes the connection
        if "the log's disk is gone" in caplog.text:
            break
        await asyncio.sleep(0.01)
    assert "connection handler failed" in caplog.text
    assert "the log's disk is gone" in caplog.text


async def test_a_producer_deletes_by_the_key_column_only(control) -> None:
    _, datasets, url = control
    producer = await hello(url, role="producer")
    no_rows = encode_columns({})
    by_key = encode_columns({"id": np.array([4, 5], dtype=np.int64)})
    not_the_key = encode_columns({"x": np.array([4.0])})
    await producer.send(codec.encode(Publish(1, "agents", no_rows, by_key)))
    await producer.send(codec.encode(Publish(2, "agents", no_rows, not_the_key)))
    await producer.send(codec.encode(Publish(3, "trucks", no_rows, by_key)))
    replies = {
        getattr(f, "req", None) or getattr(f, "ref", None): f for f in await frames(producer, 3)
    }
    first, refused, unknown = replies[1], replies[2], replies[3]
    assert isinstance(first, Published) and (first.req, first.first, first.last) == (1, 0, 1)
    assert isinstance(refused, Error) and (refused.code, refused.ref) == ("protocol", 2)
    assert "publish 2 deletes: 1 rows without the key column 'id'" in refused.message
    assert isinstance(unknown, Error) and unknown.code == "invalid_view"
    assert "unknown dataset 'trucks' (serving: agents, sensors)" in unknown.message
    assert [(name, deletes) for name, _, deletes in datasets.published] == [("agents", [4, 5])]
    await producer.close()


async def test_a_durable_write_is_passed_at_once_to_the_other_relays_whose_primitives_hold_it(
    control,
) -> None:
    """publisher/passing.py's rules through the control plane: never back to the relay it came
    through, to a relay that wants the dataset's live writes and whose primitive selects a row
    of it, a delete to every such relay holding a primitive of the dataset; a refused write, or
    one to a dataset of a kind without live writes (a region's), to none; nor anything to a
    relay that never said it wants them (``LiveWrites``)."""
    plane, _, url = control
    near, far, idle, deaf = await hello(url), await hello(url), await hello(url), await hello(url)
    await near.send(codec.encode(Acquire(1, "sensors", topic("a/#"))))
    await near.send(codec.encode(Acquire(2, "agents", Box((0, 0), (1, 1)))))
    await far.send(codec.encode(Acquire(1, "sensors", topic("b/#"))))
    await deaf.send(codec.encode(Acquire(1, "sensors", topic("#"))))
    for relay in (near, far, idle):
        await relay.send(codec.encode(LiveWrites("sensors")))
    for relay in (near, far, deaf):  # held once a later request is answered
        await relay.send(codec.encode(Acquire(8, "nope", Box((0, 0), (1, 1)))))
        assert isinstance((await frames(relay, 1))[0], Error)
    producer = await hello(url, role="producer")
    inside = encode_columns({"topic": np.array(["a/1"], dtype=object), "value": np.array([1.0])})
    by_key = encode_columns({"topic": np.array(["c/1"], dtype=object)})
    agent = encode_columns({"id": np.array([1]), "x": np.array([0.5]), "y": np.array([0.5])})
    await near.send(codec.encode(Publish(1, "sensors", inside)))  # near showed it itself
    assert isinstance((await frames(near, 1))[0], Published)
    writes = [
        Publish(2, "sensors", encode_columns({}), by_key),
        Publish(3, "sensors", inside),
        Publish(4, "agents", agent),  # a region's: not shown live anywhere
    ]
    for write in writes:
        await producer.send(codec.encode(write))
        assert isinstance((await frames(producer, 1))[0], Published)
    await producer.send(codec.encode(Publish(5, "trucks", inside)))  # refused
    assert isinstance((await frames(producer, 1))[0], Error)
    for relay in (near, far, idle, deaf):  # a fence: an acquire refused
        await relay.send(codec.encode(Acquire(9, "nope", Box((0, 0), (1, 1)))))

    async def until_fence(relay: ClientConnection) -> list[tuple[int, int]]:
        got = []
        while not isinstance(frame := (await frames(relay, 1))[0], Error):
            assert isinstance(frame, Written)
            got.append((frame.first, frame.last))
        return got

    assert await until_fence(near) == [(0, 0), (0, -1)]  # the producer's delete, then its row
    assert await until_fence(far) == [(0, 0)]  # the delete alone
    assert await until_fence(idle) == []  # no primitive
    assert await until_fence(deaf) == []  # never said it wants them
    counted = {s.name: s.value for s in plane.samples()}
    assert counted["publisher_writes_passed"] == 3
    for websocket in (near, far, idle, deaf, producer):
        await websocket.close()


async def test_curiosity_is_answered_from_the_log_or_said_lost(control) -> None:
    _, _, url = control
    relay = await hello(url)
    await relay.send(codec.encode(Curious(5, "agents", 1, 3, 4)))
    first, second = await frames(relay, 2)
    assert [(k.req, k.seq) for k in (first, second)] == [(5, 3), (5, 4)]  # type: ignore[attr-defined]
    await relay.send(codec.encode(Curious(6, "agents", 1, 1, 4)))
    (lost,) = await frames(relay, 1)
    assert isinstance(lost, Error)
    assert (lost.code, lost.ref) == ("lost", 6)
    assert "trimmed" in lost.message
    await relay.close()


async def test_a_connection_without_a_hello_is_refused_after_the_hello_timeout(control) -> None:
    plane, _, url = control
    plane.hello_timeout = 0.3
    async with connect(url) as silent:
        relay = await hello(url)  # a relay that said hello in time is served on
        error = codec.from_publisher().decode(await asyncio.wait_for(silent.recv(), 5))
        assert error == Error("handshake", "no hello within 0.3 s; closing")
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(silent.recv(), 5)
        await asyncio.sleep(0.3)
        await relay.send(codec.encode(Acquire(1, "agents", Box((0, 0), (1, 1)))))
        for _ in range(500):
            if plane.registry.plan("agents").prims:
                break
            await asyncio.sleep(0.01)
        assert len(plane.registry.plan("agents").prims) == 1
        await relay.close()


async def test_a_producer_is_told_and_closed_when_its_token_expires() -> None:
    """With tokens, a producer whose token expires gets ``unauthorized`` "the token has
    expired" and a 1008 close at expiry; a producer with a longer token goes on publishing."""
    secret = "control-secret-" + "c" * 32
    datasets = FakeDatasets()
    plane = ControlPlane(datasets, Registry(), auth=AuthConfig("HS256", secret))
    ready = asyncio.Event()
    task = asyncio.create_task(plane.serve("127.0.0.1", 0, ready=lambda _: ready.set()))
    await ready.wait()
    url = f"ws://127.0.0.1:{plane.port}"
    by_key = encode_columns({"id": np.array([4], dtype=np.int64)})
    try:
        kept = await hello(url, role="producer", token=issue("HS256", secret, ["producer"]))
        short = await hello(
            url, role="producer", token=issue("HS256", secret, ["producer"], ttl=3.0)
        )
        await short.send(codec.encode(Publish(1, "agents", encode_columns({}), by_key)))
        assert isinstance((await frames(short, 1))[0], Published), "served until it expires"
        told = codec.from_publisher().decode(await asyncio.wait_for(short.recv(), 30))
        assert told == Error(code="unauthorized", message="the token has expired")
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(short.recv(), 10)
        assert (short.close_code, short.close_reason) == (1008, "the token has expired")
        await kept.send(codec.encode(Publish(2, "agents", encode_columns({}), by_key)))
        assert isinstance((await frames(kept, 1))[0], Published)
        await kept.close()
    finally:
        plane.stop()
        await task


async def test_relays_are_told_when_a_query_stops_and_runs_again_and_newcomers_hear_of_it(
    control,
) -> None:
    plane, _, url = control
    before = await hello(url, name="before")
    stopped = DatasetState("agents", running=False, reason="worker lost", retry_in=2.0)
    plane.announce(stopped)
    assert await frames(before, 1) == [stopped]
    later = await hello(url, name="later")  # connects while it is stopped: told at once
    assert await frames(later, 1) == [stopped]
    plane.announce(DatasetState("agents", running=True))
    for relay in (before, later):
        assert await frames(relay, 1) == [DatasetState("agents", running=True)]
    last = await hello(url, name="last")  # it runs again: nothing to tell
    await last.send(codec.encode(Acquire(1, "nope", Box((0, 0), (1, 1)))))
    (answer,) = await frames(last, 1)  # the next frame answers this, no state came before
    assert isinstance(answer, Error) and answer.ref == 1
    for relay in (before, later, last):
        await relay.close()
