"""``fanout.client.following`` against real relays (in this event loop) sharing a map in a real
Redis Cluster, on a scripted publisher: a subscription entering at the wrong relay is
redirected and served by the responsible one; one sent to a relay that cannot be reached (in the
map, but dead) is served by the relay that sent it (``stay``); a view change is never
redirected; a held view whose cell is handed to the other relay (a split) moves there, the same
object, and back when it is handed back (a merge); a relay whose lease lapsed sends its views to
the other, and a subscription sent back and forth between them stays at the first."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import pytest

from fanout.client import SubscriptionError
from fanout.client.following import connect_cluster
from fanout.cluster.registry import Registry, connect
from fanout.cluster.responsibility import part_of
from fanout.cluster.settings import Cluster
from fanout.testing.catalog import catalog
from fanout.testing.ports import LOOPBACK, free_port
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.redis import throwaway_redis_cluster
from fanout.testing.relays import running_relay
from fanout.testing.wait import eventually
from fanout.views import Box

pytestmark = pytest.mark.asyncio


@pytest.fixture(scope="module")
def registry() -> Iterator[str]:
    with throwaway_redis_cluster() as nodes:
        host, port = nodes[0]
        yield f"redis://{host}:{port}"


@contextlib.asynccontextmanager
async def two_relays(registry: str, prefix: str) -> AsyncIterator[tuple[list, ScriptedPublisher]]:  # type: ignore[type-arg]
    publisher = ScriptedPublisher(catalog())
    async with (
        serving(publisher) as url,
        running_relay(url, name=f"{prefix}a", cluster=Cluster(registry, lease=30.0)) as a,
        running_relay(url, name=f"{prefix}b", cluster=Cluster(registry, lease=30.0)) as b,
    ):
        relays = [a, b]
        for server, _ in relays:
            assert server.registry is not None
            await eventually(
                lambda server=server: server.registry.beat(),
                lambda read: {f"{prefix}a", f"{prefix}b"} <= set(read.members),
                timeout=30,
                what="both in the map",
            )
        yield relays, publisher


def owned_by(server, name: str) -> Box:  # type: ignore[no-untyped-def]
    """A box of a cell the map gives to relay ``name``."""
    for x in range(0, 256 * 64, 256):
        box = Box((x + 10.0, 10.0), (x + 20.0, 20.0))
        if server.registry.map.owner_of("agents", box).name == name:
            return box
    raise AssertionError(f"no cell of {name} in 64")


async def test_a_subscription_at_the_wrong_relay_is_served_by_the_responsible_one(
    registry: str,
) -> None:
    async with two_relays(registry, "w") as ([(a, a_url), (b, b_url)], publisher):
        box = owned_by(a, "wb")
        async with connect_cluster(a_url) as cluster:
            view = await cluster.subscribe(box)
            assert cluster.relay_of(view) == b_url and cluster.redirects == 1
            assert a.registry is not None and a.registry.redirected == 1
            assert b.core.stats()["subscriptions"] == 1 and a.core.stats()["subscriptions"] == 0
            acquire = await publisher.next_acquire()
            inside = box.lo[0] + 5.0
            await publisher.send({"id": [1], "x": [inside], "y": [15.0]}, snapshots=[acquire.prim])
            await asyncio.wait_for(view.wait_updates(1), 10)
            assert set(view.rows) == {1}
            # A view change stays where the view is, whoever owns the new place.
            await view.change(owned_by(a, "wa"))
            await eventually(
                lambda: b.core.stats()["subscriptions"] == 1 and view.error is None,
                timeout=10,
                what="the changed view still at b",
            )
            assert b.registry is not None and b.registry.redirected == 0


async def test_a_subscription_sent_to_an_unreachable_relay_stays_where_it_entered(
    registry: str,
) -> None:
    async with two_relays(registry, "u") as ([(a, a_url), _], _):
        # A relay that died a moment ago: still in the map (its lease runs), gone from the port.
        dead = f"ws://{LOOPBACK}:{free_port()}"
        ghost = Registry(connect(registry), "ughost", dead, lease=30.0)
        await ghost.beat()
        try:
            await eventually(
                a.registry.beat,  # type: ignore[union-attr]
                lambda read: "ughost" in read.members,
                timeout=30,
                what="the ghost in a's map",
            )
            box = owned_by(a, "ughost")
            async with connect_cluster(a_url) as cluster:
                view = await cluster.subscribe(box)
                assert cluster.relay_of(view) == a_url
                assert a.core.stats()["subscriptions"] == 1
        finally:
            await ghost.leave()


async def test_a_relay_whose_lease_lapsed_sends_its_views_to_the_map_without_it(
    registry: str,
) -> None:
    async with two_relays(registry, "l") as ([(a, a_url), (_, b_url)], _):
        assert a.registry is not None
        box = owned_by(a, "la")
        async with connect_cluster(b_url) as cluster:
            view = await cluster.subscribe(box)
            assert cluster.relay_of(view) == a_url
            a.registry._lapse()  # what its timer does when no beat renewed the lease in time
            assert not a.registry.serving and a.core.stats()["subscriptions"] == 0
            await eventually(lambda: view.moves == 1, timeout=10, what="the view moved to b")
            assert cluster.relay_of(view) == b_url and view.error is None
            # b (whose map still holds a) sends a new one to a, which sends it back: it stays.
            again = await cluster.subscribe(box)
            assert cluster.relay_of(again) == b_url and cluster.redirects == 3
            with pytest.raises(SubscriptionError) as refused:  # a serves nothing, stay or not
                async with connect_cluster(a_url) as direct:
                    await direct.subscribe(box, max_hops=0)
            assert refused.value.code == "redirect" and refused.value.location == b_url
            await a.registry.beat()  # back in the map: it waits a lease before serving again
            assert not a.registry.serving and a.registry.lapses == 1


async def test_a_held_view_whose_cell_is_handed_over_moves_with_it_and_back(
    registry: str,
) -> None:
    async with two_relays(registry, "m") as ([(a, a_url), (b, b_url)], publisher):
        assert a.registry is not None and b.registry is not None
        box = owned_by(a, "ma")
        inside = box.lo[0] + 5.0
        async with connect_cluster(b_url) as cluster:
            view = await cluster.subscribe(box)
            assert cluster.relay_of(view) == a_url
            acquire = await publisher.next_acquire()
            await publisher.send({"id": [1], "x": [inside], "y": [15.0]}, snapshots=[acquire.prim])
            await asyncio.wait_for(view.wait_updates(1), 10)
            # a hands the cell to b, as a split does: the held view is redirected and moves.
            await a.registry.assign("mb", [part_of("agents", box)])
            assert a.core.stats()["subscriptions"] == 0  # ended with the redirect at once
            acquire = await publisher.next_acquire(timeout=10)  # b's, for the moved view
            await eventually(
                lambda: view.moves == 1 and b.core.stats()["subscriptions"] == 1,
                timeout=10,
                what="the view held at b",
            )
            assert cluster.relay_of(view) == b_url and view.error is None
            await publisher.send({"id": [2], "x": [inside], "y": [16.0]}, snapshots=[acquire.prim])
            # b's first push is full: the rows are b's view of the tick, nothing left from a.
            await eventually(lambda: set(view.rows) == {2}, timeout=10, what="b's full push")
            # b hands it back, as a merge does (once it has read that it holds the cell, as a
            # merging relay has): the view moves back to a.
            await eventually(
                b.registry.beat,
                lambda read: read.received("mb") == [part_of("agents", box)],
                timeout=10,
                what="b reading its assignment",
            )
            assert await b.registry.unassign([part_of("agents", box)]) == 1
            await eventually(
                lambda: a.core.stats()["subscriptions"] == 1 and view.moves == 2,
                timeout=10,
                what="the view back at a",
            )
            assert cluster.relay_of(view) == a_url and view.error is None
            assert b.core.stats()["subscriptions"] == 0


async def test_a_relay_joining_the_map_takes_the_held_views_of_the_parts_it_wins(
    registry: str,
) -> None:
    """Views held at a and b stay meeting at their part's owner when relay c joins: those of
    the cells c now owns move to it (the same objects), the others stay where they are."""
    async with (
        two_relays(registry, "j") as ([(a, a_url), (b, b_url)], _publisher),
        connect_cluster(a_url) as cluster,
    ):
        boxes = [Box((x + 10.0, 10.0), (x + 20.0, 20.0)) for x in range(0, 256 * 24, 256)]
        views = [await cluster.subscribe(box) for box in boxes]
        before = {id(view): cluster.relay_of(view) for view in views}
        assert set(before.values()) == {a_url, b_url}
        async with running_relay(
            a.config.upstream, name="jc", cluster=Cluster(registry, lease=30.0)
        ) as (c, c_url):
            assert c.registry is not None
            joined = await eventually(
                c.registry.beat, lambda read: "jc" in read.members, timeout=30
            )
            winners = {
                id(view)
                for view, box in zip(views, boxes, strict=True)
                if joined.owner_of("agents", box).name == "jc"
            }
            assert winners, "c wins some of 24 cells"
            for relay in (a, b):  # their next beat, now
                assert relay.registry is not None
                await relay.registry.beat()
            await eventually(
                lambda: all(view.moves == (id(view) in winners) for view in views),
                timeout=20,
                what="the views of c's cells moved, the others not",
            )
            await cluster.settled()
            for view in views:
                expected = c_url if id(view) in winners else before[id(view)]
                assert cluster.relay_of(view) == expected and view.error is None
            assert c.core.stats()["subscriptions"] == len(winners)


async def test_views_moving_to_one_relay_together_share_one_new_connection(
    registry: str,
) -> None:
    """A split moves many held views at once: the subscriber opens one connection to the relay
    they move to, not one each (a thousand handshakes at once at a relay that was just handed
    their part could time out, and end those views)."""
    async with two_relays(registry, "t") as ([(a, a_url), (b, b_url)], _publisher):
        assert a.registry is not None
        box = owned_by(a, "ta")
        async with connect_cluster(a_url) as cluster:
            views = []
            for n in range(20):
                corner = (box.lo[0] + n * 0.1, box.lo[1])
                views.append(await cluster.subscribe(Box(corner, (corner[0] + 1.0, 20.0))))
            assert {cluster.relay_of(view) for view in views} == {a_url}
            await a.registry.assign("tb", [part_of("agents", box)])
            await eventually(
                lambda: all(view.moves == 1 for view in views),
                timeout=20,
                what="every view moved to b",
            )
            await cluster.settled()
            assert {cluster.relay_of(view) for view in views} == {b_url}
            assert all(view.error is None for view in views)
            assert len(b.clients.open) == 1


async def test_subscriptions_asking_at_once_for_a_relay_that_fails_share_one_attempt() -> None:
    """Ten views moving at once to a relay that breaks the handshake off: one attempt is made,
    and each of them gets its failure (not ten attempts, one after the other)."""
    accepted = 0

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        writer.close()

    async with await asyncio.start_server(hang_up, LOOPBACK, 0) as server:
        url = f"ws://{LOOPBACK}:{server.sockets[0].getsockname()[1]}"
        async with connect_cluster(url) as cluster:
            failures = await asyncio.gather(
                *(cluster.connection(url) for _ in range(10)), return_exceptions=True
            )
            assert all(isinstance(failure, ConnectionError) for failure in failures)
            assert accepted == 1
            with pytest.raises(ConnectionError):  # a later subscription tries again
                await cluster.connection(url)
            assert accepted == 2
