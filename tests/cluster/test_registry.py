"""The map's members in a real Redis Cluster (three masters on loopback, started here): joining,
leases running out, coming back, leaving, and each member told when the map changes."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.exceptions import RedisClusterException

from fanout.cluster.registry import HandOverRefused, Registry, connect
from fanout.cluster.responsibility import Assignment, ResponsibilityMap, part_of
from fanout.launch import Children
from fanout.testing.catalog import AGENTS
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.redis import throwaway_redis_cluster
from fanout.testing.wait import eventually
from fanout.views import Box
from fanout.wire.messages import Catalog, Subscribe

pytestmark = pytest.mark.asyncio
runs = itertools.count()


@pytest.fixture(scope="module")
def node() -> Iterator[str]:
    with throwaway_redis_cluster() as nodes:
        host, port = nodes[0]
        yield f"redis://{host}:{port}"


def member(node: str, name: str, lease: float = 0.6) -> Registry:
    return Registry(connect(node), name, f"ws://{name}:1", lease=lease)


@contextlib.asynccontextmanager
async def running(registry: Registry):  # type: ignore[no-untyped-def]
    joined = asyncio.Event()
    task = asyncio.create_task(registry.run(joined.set))
    await asyncio.wait_for(joined.wait(), 30)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_members_join_see_each_other_and_a_leaver_goes_at_once(node: str) -> None:
    run = next(runs)
    names = [f"j{run}-{i}" for i in range(3)]
    seen: list[tuple[ResponsibilityMap, ResponsibilityMap]] = []
    first = member(node, names[0])
    first.on_change = lambda before, after: seen.append((before, after))
    async with running(first), running(member(node, names[1])):
        async with running(member(node, names[2])):
            await eventually(
                lambda: set(first.map.members) >= set(names), timeout=30, what="all three"
            )
            assert first.map.members[names[2]] == f"ws://{names[2]}:1"
        # A clean stop leaves at once: gone at the next beat, long before its lease.
        await eventually(lambda: names[2] not in first.map.members, timeout=30, what="left")
    assert seen and any(names[2] in after.members for _, after in seen)


async def test_a_member_that_stops_renewing_leaves_within_its_lease_and_comes_back(
    node: str,
) -> None:
    run = next(runs)
    watcher = member(node, f"w{run}")
    async with running(watcher):
        stalled = member(node, f"s{run}", lease=0.6)
        await stalled.beat()  # joined, then silent: like a relay killed
        await eventually(lambda: f"s{run}" in watcher.map.members, timeout=30, what="joined")
        started = asyncio.get_running_loop().time()
        await eventually(lambda: f"s{run}" not in watcher.map.members, timeout=30, what="gone")
        # within its lease plus a beat of the watcher (and the machine's load)
        assert asyncio.get_running_loop().time() - started < 10
        # Restarted under the same name at another URL: back with its new address.
        again = Registry(connect(node), f"s{run}", "ws://elsewhere:2", lease=0.6)
        async with running(again):
            await eventually(
                lambda: watcher.map.members.get(f"s{run}") == "ws://elsewhere:2",
                timeout=30,
                what="back",
            )
        await stalled.leave()


async def test_members_reading_the_same_map_redirect_a_view_to_the_same_owner(node: str) -> None:
    run = next(runs)
    # a lease long enough that a loaded machine's late renewal does not lapse one (rule 8: a
    # lapsed member serves nothing until it is back, and this test is about a steady map)
    members = [member(node, f"r{run}-{i}", lease=5.0) for i in range(4)]
    async with contextlib.AsyncExitStack() as stack:
        for registry in members:
            await stack.enter_async_context(running(registry))
        names = {registry.name for registry in members}
        for registry in members:
            await eventually(
                lambda registry=registry: names <= set(registry.map.members),
                timeout=30,
                what="the same members",
            )
        for x in range(0, 2048, 256):
            request = Subscribe(1, "agents", Box((x + 10, 10), (x + 60, 60)))
            answers = [registry.redirect(request, held=False) for registry in members]
            served = [
                registry.name for registry, a in zip(members, answers, strict=True) if a is None
            ]
            assert len(served) == 1  # exactly one serves it, the others send it there
            owner = members[0].map.owner_of("agents", request.view)
            assert served == [owner.name]
            assert {a.location for a in answers if a is not None} == {owner.url}


async def test_a_split_assigns_parts_to_a_standby_and_a_merge_hands_them_back(node: str) -> None:
    run = next(runs)
    giver, other = member(node, f"g{run}"), member(node, f"o{run}")
    standby = Registry(connect(node), f"s{run}", f"ws://s{run}:1", lease=0.6, standby=True)
    parts = [f"d{run}/bucket:{i}" for i in range(60)]
    async with running(giver), running(other), running(standby):
        names = {giver.name, other.name, standby.name}
        await eventually(
            lambda: names <= set(giver.map.members) and standby.name in giver.map.standby,
            timeout=30,
            what="three members, one a standby",
        )
        table = giver.map
        assert all(table.owner(part).name != standby.name for part in parts)  # owns nothing
        assert table.idle_standbys() == [standby.name]
        mine = [part for part in parts if table.owner(part).name == giver.name][:3]
        theirs = next(part for part in parts if table.owner(part).name == other.name)
        await giver.assign(standby.name, mine, {mine[0]: "box:0,0,1,1"})
        assert {giver.map.owner(part).name for part in mine} == {standby.name}
        # A part with something to warm waits for its member to hold it; one without is ready.
        warm = Assignment(standby.name, giver.name, False, "box:0,0,1,1")
        assert giver.map.assigned[mine[0]] == warm
        assert giver.map.assigned[mine[1]] == Assignment(standby.name, giver.name)
        assert giver.map.idle_standbys() == []
        await eventually(
            lambda: standby.map.received(standby.name) == sorted(mine),
            timeout=30,
            what="the standby seeing its parts",
        )
        # Only the member says a part is warm, and once.
        assert await other.warmed([mine[0]]) == 0
        assert await standby.warmed(mine) == 1
        assert standby.map.assigned[mine[0]] == Assignment(
            standby.name, giver.name, True, warm.warm
        )
        assert await standby.warmed(mine) == 0
        # Nobody hands over a part that is not theirs now: not one assigned elsewhere...
        with pytest.raises(HandOverRefused, match="not the giver's"):
            await other.assign(standby.name, [mine[0]])
        # ...nor to a relay that is not in the map.
        with pytest.raises(HandOverRefused, match="is not live"):
            await other.assign(f"nobody{run}", [theirs])
        assert await standby.unassign([*mine, theirs]) == len(mine)  # only what it held
        assert all(standby.map.owner(part).name == giver.name for part in mine)
        await eventually(
            lambda: all(giver.map.owner(part).name == giver.name for part in mine),
            timeout=30,
            what="the parts back at the giver",
        )


async def test_a_giver_with_a_stale_map_is_refused_and_a_dead_standby_loses_its_parts(
    node: str,
) -> None:
    run = next(runs)
    giver = member(node, f"sg{run}", lease=5.0)
    silent = Registry(connect(node), f"ss{run}", "ws://ss:1", lease=0.6, standby=True)
    await silent.beat()
    await giver.beat()
    part = next(
        p
        for p in (f"e{run}/bucket:{i}" for i in range(99))
        if giver.map.owner(p).name == giver.name
    )
    await giver.assign(silent.name, [part])
    assert giver.map.owner(part).name == silent.name
    # Its lease runs out: swept with its assignment, the part is the giver's again for good.
    await eventually(
        giver.beat,
        lambda table: silent.name not in table.members and part not in table.assigned,
        timeout=30,
        every=0.2,
        what="the silent standby and its assignment gone",
    )
    assert giver.map.owner(part).name == giver.name
    late = member(node, f"sl{run}", lease=5.0)
    await late.beat()  # joined after the giver last read the map
    again = Registry(connect(node), f"ss2{run}", "ws://ss2:1", lease=5.0, standby=True)
    await again.beat()
    with pytest.raises(HandOverRefused, match="the map changed"):
        await giver.assign(again.name, [part])
    for registry in (giver, silent, late, again):
        await registry.leave()


async def test_a_relay_about_to_redirect_reads_the_map_afresh_and_shares_the_read(
    node: str,
) -> None:
    """A part just handed over: the relay it went to has not read the map since, and would
    send a new subscription of it back to the giver; ``confirm`` reads the map first (an HTTP
    client follows redirects without asking to stay)."""
    run = next(runs)
    giver = member(node, f"cg{run}", lease=30.0)
    standby = Registry(connect(node), f"cs{run}", f"ws://cs{run}:1", lease=30.0, standby=True)
    await giver.beat()
    await standby.beat()  # its map: both; then it reads no more until asked
    boxes = (Box((x + 10, 10), (x + 60, 60)) for x in range(0, 256 * 64, 256))
    view = next(box for box in boxes if giver.map.owner_of("agents", box).name == giver.name)
    request = Subscribe(1, "agents", view)
    await giver.assign(standby.name, [part_of("agents", view, giver.map.side)])
    stale = standby.redirect(request, held=False)
    assert stale is not None and stale.location == giver.url  # it would send it back
    await standby.confirm(request)
    assert standby.redirect(request, held=False) is None  # now it serves it
    read = standby.map
    await standby.confirm(request)  # served here: nothing read
    assert standby.map is read
    # Callers waiting while a beat is under way share one read, begun after they asked.
    beaten, first, second = await asyncio.gather(standby.beat(), standby.fresh(), standby.fresh())
    assert first is second and first is not beaten
    for registry in (giver, standby):
        await registry.leave()


async def test_a_relay_process_stopped_by_sigterm_leaves_the_map_at_once(
    node: str, tmp_path: Path
) -> None:
    """``fanout relay`` under a supervisor (SIGTERM) stops as cleanly as under Ctrl-C: it exits
    0 and is gone from the map at once, not after its lease (60 s here)."""
    name = f"term{next(runs)}"
    watcher = member(node, f"watch-{name}", lease=60.0)
    async with serving(ScriptedPublisher(Catalog([AGENTS]))) as url, Children() as children:
        args = ["--publisher", url, "--port", "0", "--name", name, "--registry", node]
        relay = await children.start(
            "relay", [*args, "--registry-lease", "60"], tmp_path / "relay.log"
        )
        try:
            await eventually(lambda: watcher.beat(join=False), lambda read: name in read.members)
        finally:
            status = await relay.stop()
    try:
        assert status == 0, (tmp_path / "relay.log").read_text()
        assert name not in (await watcher.beat(join=False)).members
    finally:
        await watcher.redis.aclose()


async def test_a_standby_that_leaves_is_a_standby_no_more(node: str) -> None:
    """Leaving takes a member out of the standbys too: a split would otherwise pick a relay that
    is gone (its ``standby`` entry was kept until... never: only a lapsed lease removed it)."""
    name = f"sb{next(runs)}"
    standby = Registry(connect(node), name, f"ws://{name}:1", lease=60.0, standby=True)
    watcher = member(node, f"watch-{name}", lease=60.0)
    try:
        await standby.beat()
        assert name in (await watcher.beat(join=False)).standby
        await standby.leave()  # closes its client too
        read = await watcher.beat(join=False)
        assert name not in read.members and name not in read.standby
    finally:
        await watcher.redis.aclose()


async def test_a_member_whose_redis_cluster_answers_not_at_all_keeps_its_map_and_beats_on(
    node: str,
) -> None:
    """redis-py raises ``RedisClusterException`` (not a ``RedisError``) when no node of the
    cluster answers: a beat failing so keeps the last map (rule 5) and the member runs on."""
    run = next(runs)
    registry = member(node, f"u{run}")
    async with running(registry) as task:
        held = registry.map
        beat = registry._beat

        async def unreachable(**_: object) -> object:
            raise RedisClusterException("Redis Cluster cannot be connected")

        registry._beat = unreachable  # type: ignore[assignment]
        await eventually(lambda: registry.failed_beats >= 2, timeout=30, what="failed beats")
        assert not task.done() and registry.map == held
        registry._beat = beat
        failed = registry.failed_beats
        await asyncio.sleep(registry.lease)
        assert registry.failed_beats == failed and f"u{run}" in registry.map.members


async def test_a_lapsed_member_is_told_when_it_lapses_and_when_it_serves_again(
    node: str,
) -> None:
    """Rule 8: the lapse watchers get the map without it; the back watchers are told a lease
    after a beat brought it back, when ``serving`` turns true."""
    name = f"l{next(runs)}"
    lapsed = member(node, name, lease=2.0)
    told: list[object] = []
    lapsed.lapse_watchers.append(told.append)
    lapsed.back_watchers.append(lambda: told.append(lapsed.serving))
    await lapsed.beat()  # joined, then silent: its lease lapses unrenewed
    await eventually(lambda: len(told) == 1, timeout=10, what="the lapse")
    assert isinstance(told[0], ResponsibilityMap) and name not in told[0].members
    assert not lapsed.serving
    back = asyncio.get_running_loop().time()
    async with running(lapsed):  # beating again
        assert not lapsed.serving  # back in the map, it waits a lease
        await eventually(lambda: len(told) == 2, timeout=10, what="serving again")
        assert told[1] is True and asyncio.get_running_loop().time() - back >= 2.0
    assert lapsed.lapses == 1
