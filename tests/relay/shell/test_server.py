"""The relay's asyncio shell over real sockets, against a scripted publisher on loopback.

The publisher here is ``fanout.testing.publisher.ScriptedPublisher``, speaking the real protocol
(so these tests need no Spark); the relay and the subscribers are the real ones.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from tests.relay.shell.deployments import INFO, LIMITS, MARGIN, next_update, running
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from fanout.client import HandshakeRefused, SubscriptionError, connect
from fanout.cluster.upstreams import Upstreams
from fanout.connection import Outbound
from fanout.metrics import scrape
from fanout.relay.config import Limits
from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import RelayCore
from fanout.relay.shell.samples import CORE
from fanout.relay.shell.server import RelayServer
from fanout.relay.shell.upstreamlink import UPSTREAM_READ, _read_more_at_once
from fanout.testing.publisher import ScriptedPublisher
from fanout.testing.wait import eventually
from fanout.tiers.below import Relays
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.handshake import AcceptingSession
from fanout.wire.messages import (
    PROTOCOL_VERSION,
    Catalog,
    DatasetInfo,
    Error,
    Hello,
    Publish,
    Published,
    Push,
    Subscribe,
    Subscribed,
    Transform,
    Welcome,
)


@pytest.fixture
async def deployment() -> AsyncIterator[tuple[ScriptedPublisher, RelayServer, str]]:
    async with running() as deployed:
        yield deployed


async def test_a_subscriber_gets_its_view_through_the_relay(deployment) -> None:
    publisher, _, url = deployment
    async with connect(url) as subscriber:
        view = await subscriber.subscribe(Box((0, 0), (10, 10)))
        acquire = await publisher.next_acquire()
        await publisher.send(
            {"id": [1, 2], "x": [1.0, 11.0], "y": [1.0, 11.0]}, snapshots=[acquire.prim]
        )
        update = await next_update(view)
        assert update.full
        assert view.rows == {1: {"id": 1, "x": 1.0, "y": 1.0}}
        await publisher.send({"id": [1, 3], "x": [2.0, 3.0], "y": [2.0, 3.0]}, tick=10)
        update = await next_update(view)
        assert sorted(view.rows) == [1, 3]
        assert view.rows[1]["x"] == 2.0
        assert (update.seq, update.tick) == (1, 10)


async def first_push(publisher: ScriptedPublisher, subscriber):
    """Subscribe to a box; the publisher answers its acquire with one row. (view, acquire)"""
    view = await subscriber.subscribe(Box((0, 0), (10, 10)))
    acquire = await publisher.next_acquire()
    await publisher.send({"id": [1], "x": [1.0], "y": [1.0]}, snapshots=[acquire.prim])
    await next_update(view)
    return view, acquire


async def test_metrics_count_what_the_relay_did(deployment) -> None:
    publisher, _, url = deployment
    async with connect(url) as subscriber:
        await first_push(publisher, subscriber)
        live = await asyncio.to_thread(scrape, url)
    assert live["fanout_relay_subscriptions"] == 1
    assert live["fanout_relay_connections"] == 1
    assert live["fanout_relay_upstream_connected"] == 1
    assert live["fanout_relay_rows"] == 1
    assert live["fanout_relay_pushes_total"] == 1
    assert live["fanout_relay_bytes_sent_total"] > 0
    # the subscriber's connection closes; its bytes stay counted
    after = await eventually(
        lambda: scrape(url), lambda now: now["fanout_relay_connections"] == 0, in_thread=True
    )
    assert after["fanout_relay_subscriptions"] == 0
    assert after["fanout_relay_bytes_sent_total"] >= live["fanout_relay_bytes_sent_total"]
    assert after["fanout_relay_frames_sent_total"] >= live["fanout_relay_frames_sent_total"]


def test_every_core_counter_is_named_and_explained_for_metrics() -> None:
    core = RelayCore(Policy())
    # the forward policy's (relay.cluster.sharing): its routes' counts and its open links
    forwarding = {*Upstreams("r").stats(), "peer_links"}
    counters = set(core.stats()) | set(Relays(core).stats()) | forwarding
    assert counters == set(CORE)


async def test_a_refused_subscription_raises_and_the_connection_keeps_working(deployment) -> None:
    publisher, _, url = deployment
    async with connect(url) as subscriber:
        with pytest.raises(SubscriptionError, match="unknown dataset 'nope'"):
            await subscriber.subscribe(Box((0, 0), (1, 1)), dataset="nope")
        view = await subscriber.subscribe(Box((0, 0), (10, 10)))
        acquire = await publisher.next_acquire()
        await publisher.send({"id": [5], "x": [5.0], "y": [5.0]}, snapshots=[acquire.prim])
        await next_update(view)
        assert list(view.rows) == [5]


async def raw_session(url: str, max_queue: int = 16):
    websocket = await ws_connect(url, max_queue=max_queue)
    await websocket.send(codec.encode(Hello(PROTOCOL_VERSION, "subscriber")))
    assert isinstance(codec.to_subscriber().decode(await websocket.recv()), Welcome)
    return websocket


async def test_malformed_frames_get_errors_while_others_are_served(deployment) -> None:
    publisher, _, url = deployment
    async with connect(url) as good:
        view = await good.subscribe(Box((0, 0), (10, 10)))
        acquire = await publisher.next_acquire()
        read_before = (await asyncio.to_thread(scrape, url))["fanout_relay_frames_received_total"]
        bad = await raw_session(url)
        try:
            await bad.send(b"\x81\xa4type\xa5bogus")
            error = codec.to_subscriber().decode(await bad.recv())
            assert isinstance(error, Error)
            assert error.code == "protocol"
            await bad.send("text is not the protocol")
            error = codec.to_subscriber().decode(await bad.recv())
            assert isinstance(error, Error)
            assert "text messages" in error.message
            # the bad connection still works for well-formed frames
            await bad.send(codec.encode(Subscribe(1, "agents", Box((0, 0), (1, 1)))))
            assert isinstance(codec.to_subscriber().decode(await bad.recv()), Subscribed)
            read = (await asyncio.to_thread(scrape, url))["fanout_relay_frames_received_total"]
            assert read - read_before == 4  # Hello, the two bad frames, Subscribe
        finally:
            await bad.close()
        await publisher.send({"id": [7], "x": [7.0], "y": [7.0]}, snapshots=[acquire.prim])
        await next_update(view)
        assert list(view.rows) == [7]


async def test_a_handshake_with_the_wrong_version_is_refused(deployment) -> None:
    _, _, url = deployment
    async with ws_connect(url) as websocket:
        await websocket.send(codec.encode(Hello(PROTOCOL_VERSION + 1, "subscriber")))
        error = codec.to_subscriber().decode(await websocket.recv())
        assert isinstance(error, Error)
        assert error.code == "handshake"
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(websocket.recv(), 5)


async def test_a_connection_without_a_hello_is_refused_after_the_hello_timeout() -> None:
    async with (
        running(limits=replace(LIMITS, hello_timeout=0.3)) as (_, relay, url),
        ws_connect(url) as silent,
        connect(url) as greeted,
    ):
        error = codec.to_subscriber().decode(await asyncio.wait_for(silent.recv(), 5))
        assert error == Error("handshake", "no hello within 0.3 s; closing")
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(silent.recv(), 5)
        await asyncio.sleep(0.3)  # a connection that said hello is never timed out
        view = await asyncio.wait_for(greeted.subscribe(Box((0, 0), (10, 10))), 5)
        assert view.sub == 1 and relay.core.stats()["subscriptions"] == 1


async def test_beyond_max_connections_a_hello_is_refused_as_unavailable() -> None:
    async with running(limits=replace(LIMITS, max_connections=2)) as (_, relay, url):
        async with connect(url) as first, connect(url):
            with pytest.raises(HandshakeRefused, match="serves its most connections") as full:
                async with connect(url):
                    pass
            assert full.value.code == "unavailable"
            assert (await asyncio.wait_for(first.subscribe(Box((0, 0), (1, 1))), 5)).sub == 1
            scraped = await asyncio.to_thread(scrape, url)
            assert scraped["fanout_relay_connections_refused_total"] == 1
        await eventually(
            lambda: not relay.clients.connected, what="both closed: there is room again"
        )
        async with connect(url) as again:
            assert (await asyncio.wait_for(again.subscribe(Box((0, 0), (1, 1))), 5)).sub == 1


async def test_a_slow_consumer_is_cut_off_without_delaying_others(deployment) -> None:
    publisher, _, url = deployment
    rows = 20_000
    big = {"id": list(range(rows)), "x": [5.0] * rows, "y": [5.0] * rows}
    # Subscribes, then never reads; it takes in at most one message, so the kernel's buffers do
    # not grow to hold everything the relay writes (loopback receive buffers may grow to 32 MB).
    slow = await raw_session(url, max_queue=1)
    await slow.send(codec.encode(Subscribe(1, "agents", Box((0, 0), (10, 10)), rate=100.0)))
    acquire = await publisher.next_acquire()
    async with connect(url) as fast:
        view = await fast.subscribe(Box((0, 0), (10, 10)), rate=100.0)
        await publisher.send(big, snapshots=[acquire.prim])
        received = 0
        for step in range(30):
            moved = {"id": big["id"], "x": [5.0 + (step % 3) * 0.1] * rows, "y": big["y"]}
            await publisher.send(moved)
            await next_update(view)
            received += 1
        assert received == 30
        # the slow one has been closed with a reason, not left to buffer without bound
        await asyncio.sleep(1.5)
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                await asyncio.wait_for(slow.recv(), 5)
        assert closed.value.rcvd is not None
        assert "slow consumer" in closed.value.rcvd.reason
    scraped = await asyncio.to_thread(scrape, url)
    assert scraped["fanout_relay_slow_consumers_closed_total"] == 1


async def test_requests_pipelined_behind_a_draining_push_do_not_make_a_slow_consumer(
    deployment,
) -> None:
    """A client that sends many requests at once while a large push of its is still draining
    (as one moving its views after a split does) gets every answer, in order, and stays: the
    answers have room of their own beyond ``queue_limit`` (64 frames)."""
    publisher, relay, url = deployment
    rows = 20_000
    big = {"id": list(range(rows)), "x": [5.0] * rows, "y": [5.0] * rows}
    client = await raw_session(url, max_queue=1)  # reads one message, then the kernel holds
    try:
        await client.send(codec.encode(Subscribe(1, "agents", Box((0, 0), (10, 10)), rate=100.0)))
        acquire = await publisher.next_acquire()
        await publisher.send(big, snapshots=[acquire.prim])
        step = 0

        async def draining() -> bool:
            nonlocal step
            if any(not outbound.idle for outbound in relay.clients.open.values()):
                return True
            step += 1  # the kernel took it all: another large push
            moved = {**big, "x": [5.0 + (step % 3) * 0.1] * rows}
            await publisher.send(moved)
            return False

        await eventually(draining, timeout=30, what="a push left draining")
        requests = range(2, 202)  # 200 requests, far more than queue_limit
        for sub in requests:
            view = Box((500 + sub, 500), (501 + sub, 501))  # nothing there: no pushes
            await client.send(codec.encode(Subscribe(sub, "agents", view, rate=1.0)))
        answered = []
        while len(answered) < 1 + len(requests):
            frame = codec.to_subscriber().decode(await asyncio.wait_for(client.recv(), 10))
            if isinstance(frame, Subscribed):
                answered.append(frame.sub)
        assert answered == [1, *requests]
    finally:
        await client.close()
    scraped = await asyncio.to_thread(scrape, url)
    assert scraped["fanout_relay_slow_consumers_closed_total"] == 0


async def test_the_relay_reacquires_after_the_publisher_connection_drops(deployment) -> None:
    publisher, _, url = deployment
    async with connect(url) as subscriber:
        view, first = await first_push(publisher, subscriber)
        await publisher.relays.pop().close()
        again = await publisher.next_acquire(10)
        assert (again.prim, again.view) == (first.prim, first.view)
        assert publisher.connections == 2
        await publisher.send({"id": [2], "x": [2.0], "y": [2.0]}, snapshots=[again.prim])
        await next_update(view)
        assert sorted(view.rows) == [2]  # the snapshot replaced what the relay held


async def test_a_token_renewed_in_its_file_is_presented_at_the_next_connection(tmp_path) -> None:
    token_file = tmp_path / "relay.jwt"
    token_file.write_text("first\n")
    async with running(upstream={"token": "first", "token_file": token_file}) as (publisher, _, _):
        assert [hello.token for hello in publisher.hellos] == ["first"]
        token_file.write_text("renewed\n")  # what a renewal sidecar does before expiry
        await publisher.relays.pop().close()  # as the publisher does when a token expires
        await eventually(lambda: publisher.connections, lambda count: count == 2, timeout=10)
        assert publisher.hellos[-1].token == "renewed"
        token_file.unlink()  # unreadable: the last token read is presented, and said so
        await publisher.relays.pop().close()
        await eventually(lambda: publisher.connections, lambda count: count == 3, timeout=10)
        assert publisher.hellos[-1].token == "renewed"


async def test_a_malformed_batch_drops_the_publisher_link_and_the_relay_starts_over(
    deployment, caplog: pytest.LogCaptureFixture
) -> None:
    publisher, _, url = deployment
    async with connect(url) as subscriber:
        view, first = await first_push(publisher, subscriber)
        await publisher.send({"id": [2], "x": [2.0]})  # no "y": refused whole, not written
        again = await publisher.next_acquire(10)  # a new connection
        assert publisher.connections == 2 and again.view == first.view
        assert "upsert columns" in caplog.text
        assert view.rows == {1: {"id": 1, "x": 1.0, "y": 1.0}}  # nothing of it reached anyone
        publisher.next_seq["agents"] = 1  # the relay resumes after seq 0, the last batch it took
        await publisher.send({"id": [3], "x": [3.0], "y": [3.0]}, snapshots=[again.prim])
        await next_update(view)
        assert sorted(view.rows) == [3]


async def test_a_catalog_the_relay_cannot_hold_is_logged_and_the_relay_connects_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad = DatasetInfo("agents", "id", {"id": "<i8", "x": "<c16", "y": "<f8"}, "space", ["x", "y"])
    publisher = ScriptedPublisher([Catalog([bad]), Catalog([INFO])])
    async with running(publisher) as (_, _, url), connect(url) as subscriber:
        assert "column 'x' has dtype '<c16'" in caplog.text
        view, _ = await first_push(publisher, subscriber)  # ready once it could hold a catalog
        assert view.rows == {1: {"id": 1, "x": 1.0, "y": 1.0}}
        assert publisher.connections == 2


async def test_subscribers_are_told_each_dataset_and_the_views_it_takes() -> None:
    orders = DatasetInfo("orders", "order_id", {"order_id": "<i8", "amount": "<f8"}, "sql", [])
    publisher = ScriptedPublisher([Catalog([INFO, orders]), Catalog([INFO])])
    async with running(publisher) as (_, _, url):
        async with connect(url) as subscriber:
            assert subscriber.datasets == {"agents": "region", "orders": "sql"}
        await publisher.relays.pop().close()  # the relay connects again: the second catalog
        async with asyncio.timeout(10):
            while True:
                async with connect(url) as subscriber:
                    if subscriber.datasets == {"agents": "region"}:
                        break
                await asyncio.sleep(0.05)


async def test_transforms_and_capabilities_reach_the_subscriber(deployment) -> None:
    publisher, _, url = deployment
    async with connect(url, capabilities=["fixed"]) as subscriber:
        view = await subscriber.subscribe(
            Box((0, 0), (10, 10)), transform=Transform(columns=["x"]), priority=3
        )
        assert view.columns == ["id", "x"]
        assert view.effective_transform == Transform(
            columns=["x"], precision="fixed", quantum=Transform.DEFAULT_QUANTUM
        )
        acquire = await publisher.next_acquire()
        await publisher.send({"id": [1], "x": [1.5], "y": [2.0]}, snapshots=[acquire.prim])
        await next_update(view)
        assert view.rows == {1: {"id": 1, "x": 1536}}  # 1.5 in units of 1/1024
        await view.change(Box((0, 0), (9, 9)))  # keeps its transform
        await publisher.send({"id": [1], "x": [2.0], "y": [2.0]})
        await next_update(view)
        assert view.rows == {1: {"id": 1, "x": 2048}}


async def test_many_subscriptions_are_served_in_rounds_that_yield() -> None:
    async with running(planning=replace(MARGIN, pump_budget=0.0001)) as (publisher, relay, url):
        async with connect(url) as first, connect(url) as second:
            views = [
                await subscriber.subscribe(Box((0, 0), (10, 10)), rate=100.0)
                for subscriber in (first, second)
                for _ in range(40)
            ]
            acquire = await publisher.next_acquire()
            await publisher.send({"id": [1], "x": [1.0], "y": [1.0]}, snapshots=[acquire.prim])
            await asyncio.gather(*(asyncio.wait_for(v.wait_updates(1), 10) for v in views))
            assert all(view.rows == {1: {"id": 1, "x": 1.0, "y": 1.0}} for view in views)
        stats = relay.core.stats()
        assert stats["bodies_shared"] >= 78  # one body for 80 subscriptions of one view


async def test_a_slow_reader_gets_fewer_larger_pushes_while_others_get_every_tick() -> None:
    async with running(limits=Limits(stall_timeout=30.0)) as (publisher, relay, url):
        rows = 20_000
        big = {"id": list(range(rows)), "x": [5.0] * rows, "y": [5.0] * rows}
        slow = await ws_connect(url, max_queue=1)
        await slow.send(codec.encode(Hello(PROTOCOL_VERSION, "subscriber")))
        assert isinstance(codec.to_subscriber().decode(await slow.recv()), Welcome)
        await slow.send(codec.encode(Subscribe(1, "agents", Box((0, 0), (10, 10)), rate=100.0)))
        assert isinstance(codec.to_subscriber().decode(await slow.recv()), Subscribed)
        acquire = await publisher.next_acquire()
        async with connect(url) as fast:
            view = await fast.subscribe(Box((0, 0), (10, 10)), rate=100.0)
            await publisher.send(big, snapshots=[acquire.prim])
            await next_update(view)
            ticks = 30
            for step in range(ticks):  # the slow one reads nothing meanwhile
                moved = {"id": big["id"], "x": [5.0 + (step % 3) * 0.1] * rows, "y": big["y"]}
                await publisher.send(moved)
                update = await next_update(view)
                assert update.seq == step + 1  # the fast one gets every tick, in time
            received = []
            while not received or received[-1].seq < ticks:
                received.append(
                    codec.to_subscriber().decode(await asyncio.wait_for(slow.recv(), 10))
                )
            assert len(received) < ticks + 1  # ticks were coalesced, not queued
            assert all(isinstance(frame, Push) for frame in received)
            slow_sub = relay.core.downstream.get((1, 1))
            assert slow_sub is not None and slow_sub.coalesced > 0
            fast_sub = relay.core.downstream.get((2, 1))
            assert fast_sub is not None and fast_sub.coalesced == 0
        await slow.close()


async def test_the_upstream_link_reads_a_batch_in_large_reads(deployment) -> None:
    # asyncio reads 256 KiB a turn of the loop; a batch of megabytes behind a busy pump would
    # come in over many rounds of pushes. The relay's upstream link reads what is there.
    _, relay, _ = deployment
    assert relay.upstream._outbound is not None
    assert relay.upstream._outbound._websocket.transport.max_size == UPSTREAM_READ


async def test_reading_more_at_once_leaves_other_transports_alone() -> None:
    class Elsewhere(asyncio.BaseTransport):  # e.g. another event loop's, with no max_size
        pass

    transport = Elsewhere()
    _read_more_at_once(transport)
    assert not hasattr(transport, "max_size")


async def test_a_view_whose_data_the_publisher_refuses_ends_with_the_publishers_error(
    deployment,
) -> None:
    publisher, _, url = deployment
    async with connect(url) as subscriber:
        view = await subscriber.subscribe(Box((0, 0), (10, 10)))
        acquire = await publisher.next_acquire()
        refusal = Error("invalid_view", "dataset 'agents' is gone", ref=acquire.prim)
        assert await publisher.broadcast(refusal) == 1
        with pytest.raises(SubscriptionError, match="refused data this view needs: dataset"):
            await next_update(view)


async def test_a_subscribers_write_is_forwarded_and_answered_under_its_req() -> None:
    seen: list[object] = []
    publisher = ScriptedPublisher(Catalog([INFO]), on_frame=seen.append)

    def forwarded() -> list[Publish]:
        return [frame for frame in seen if isinstance(frame, Publish)]

    async with running(publisher) as (_, _, url), connect(url) as subscriber:
        write = asyncio.create_task(
            subscriber.publish("agents", [{"id": 7, "x": 1.0, "y": 2.0}], [3], key="id")
        )
        first = (await eventually(forwarded))[0]
        assert first.req < 0 and first.dataset == "agents"  # the relay's own req
        await publisher.broadcast(Published(first.req, 10, 11))
        assert await asyncio.wait_for(write, 5) == (10, 11)
        refused = asyncio.create_task(subscriber.publish("agents", [{"id": 8, "x": 0.0, "y": 0.0}]))
        second = (await eventually(lambda: forwarded()[1:]))[0]
        await publisher.broadcast(Error("bad_request", "no such thing", ref=second.req))
        with pytest.raises(SubscriptionError, match="bad_request: no such thing"):
            await asyncio.wait_for(refused, 5)
        lost = asyncio.create_task(subscriber.publish("agents", [{"id": 9, "x": 0.0, "y": 0.0}]))
        await eventually(lambda: forwarded()[2:])
        await publisher.relays[0].close()  # the answer is lost with the connection
        with pytest.raises(SubscriptionError, match=r"unavailable: .*may or may not be applied"):
            await asyncio.wait_for(lost, 5)


def _alive(*kinds: type) -> dict[str, int]:
    """Instances of ``kinds`` the collector tracks, unreachable ones not yet collected too."""
    found = dict.fromkeys((kind.__name__ for kind in kinds), 0)
    for each in gc.get_objects():
        if type(each) in kinds:
            found[type(each).__name__] += 1
    return found


async def test_a_closed_connection_is_freed_without_waiting_for_a_full_collection(
    deployment,
) -> None:
    """Its objects in no reference cycle: a relay that keeps 100,000 objects collects them all
    rarely, and closed connections (their sockets, buffers, tasks) waited for that."""
    _, _, url = deployment
    kinds = (Outbound, AcceptingSession)
    async with connect(url):  # one first, whatever it leaves for good
        pass
    gc.collect()
    gc.disable()
    try:
        before = _alive(*kinds)
        for _ in range(5):
            async with connect(url):
                pass
        await eventually(lambda: _alive(*kinds), lambda now: now == before, what="freed")
    finally:
        gc.enable()
