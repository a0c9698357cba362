"""Four relays sharing a map of responsibility in a real Redis Cluster, with a real Spark
publisher (issue 27, deliverable 2 and its tests): started once for the module, as a user would
(``fanout relay --registry redis://...``).

Subscribers enter at any relay (round robin, as a load balancer spreads them) through
``fanout.client.following`` and are redirected to the relay the map makes responsible for their
view's cell; the publisher then holds the same primitives at the same relays whichever relay they
entered at. A relay killed with SIGKILL leaves the map within a lease; its ``every``
subscribers resume through a surviving relay, are redirected to the cell's new owner, and lose,
duplicate and reorder nothing (``fanout.testing.audit`` against the publisher's log), while the
other relays' subscribers are served throughout; restarted under its name, it is back in the map.

Split and merge on load (deliverable 3) are tested in ``test_split.py``; its fixtures and
helpers stay importable from here under their names.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from tests.integration.test_split import (  # noqa: F401 (moved there, importable from here)
    SPLIT_BOXES,
    SPLIT_DWELL,
    SPLITTERS,
    _splitter,
    audited,
    last_seq,
    split_registry,
    splitters,
)
from tests.integration.test_tiers import Recorder, states, until

from fanout.client import connect
from fanout.client.following import connect_cluster
from fanout.client.publisher import open_producer
from fanout.cluster.responsibility import ResponsibilityMap
from fanout.launch import Child, Children
from fanout.publisher.log import SqliteLog
from fanout.testing.audit import audit
from fanout.testing.clusterview import (
    Follower,
    members_seen,
    metric,
    primitives_by_relay,
    started_together,
)
from fanout.testing.redis import throwaway_redis_cluster
from fanout.testing.wait import eventually
from fanout.views import Box
from fanout.views.topic import parse as topic

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

NAMES = ("r0", "r1", "r2", "r3")
LEASE = 2.0
#: One box in each of twelve cells of the 256-unit grid over the 1,000-unit world.
BOXES = [
    Box((x + 60, y + 60), (x + 190, y + 190)) for x in (0, 256, 512, 768) for y in (0, 256, 512)
]


#: The simulation of conftest's publisher, and topics fed by a producer.
CONFIG = """
[datasets.agents]
source = { kind = "simulation", agents = 2000 }

[datasets.sensors]
key = "topic"
schema = { topic = "string", value = "double" }
index = "topic"
source = "ingest"
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def publisher(children: Children, tmp_path: Path) -> AsyncIterator[Child]:
    """``fanout publisher`` serving 2,000 agents at 10 ticks/s and a topic dataset."""
    config = tmp_path / "fanout.toml"
    config.write_text(CONFIG)
    args = ["--config", str(config), "--port", "0", "--state-dir", str(tmp_path / "publisher")]
    child = await children.start(
        "publisher", [*args, "--log-level", "info"], tmp_path / "publisher.log"
    )
    try:
        yield child
    finally:
        await child.stop()


@pytest.fixture(scope="module")
def registry() -> Iterator[str]:
    with throwaway_redis_cluster() as nodes:
        host, port = nodes[0]
        yield f"redis://{host}:{port}"


async def _relay(
    children: Children, publisher: Child, registry: str, name: str, tmp_path: Path, *, port: int
) -> Child:
    args = ["--publisher", publisher.url, "--port", str(port), "--name", name, "--grace", "1"]
    args += ["--registry", registry, "--registry-lease", str(LEASE), "--log-level", "info"]
    return await children.start("relay", args, tmp_path / f"relay-{name}.log")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def relays(
    children: Children, publisher: Child, registry: str, tmp_path: Path
) -> AsyncIterator[list[Child]]:
    """Four relays in the map; a test may replace one with its restarted self."""
    starting = (_relay(children, publisher, registry, name, tmp_path, port=0) for name in NAMES)
    async with started_together(*starting) as started:
        yield started


def the_map(relays: list[Child], alive: set[str] | None = None) -> ResponsibilityMap:
    """The map as the relays should read it (names -> URLs of the live ones)."""
    alive = set(NAMES) if alive is None else alive
    return ResponsibilityMap({n: c.url for n, c in zip(NAMES, relays, strict=True) if n in alive})


async def test_subscribers_entering_anywhere_meet_at_the_responsible_relay(
    publisher: Child, relays: list[Child], tmp_path: Path
) -> None:
    await members_seen(relays, len(NAMES))
    expected = {i: the_map(relays).owner_of("agents", box).url for i, box in enumerate(BOXES)}
    assert len(set(expected.values())) >= 3  # the cells are spread over the relays
    owners = {
        name for name, child in zip(NAMES, relays, strict=True) if child.url in expected.values()
    }
    by_entry = {}
    for label, entries in (
        ("all at r0", [relays[0].url] * len(BOXES)),
        ("round robin", [relays[i % len(relays)].url for i in range(len(BOXES))]),
    ):
        async with contextlib.AsyncExitStack() as stack:
            clusters = {
                url: await stack.enter_async_context(connect_cluster(url)) for url in set(entries)
            }
            views = [
                await clusters[url].subscribe(box, rate=20)
                for url, box in zip(entries, BOXES, strict=True)
            ]
            serving = {
                i: clusters[url].relay_of(view)
                for i, (url, view) in enumerate(zip(entries, views, strict=True))
            }
            assert serving == expected, label
            await asyncio.gather(*(asyncio.wait_for(v.wait_updates(2), 120) for v in views))
            assert any(view.rows for view in views)
            held = await eventually(
                lambda: primitives_by_relay(publisher),
                lambda held: all(held.get(name, 0) > 0 for name in owners),
                timeout=60,
                what="primitives at every responsible relay",
            )
            by_entry[label] = {name: count for name, count in held.items() if count}
            redirected = sum([await metric(c.url, "fanout_relay_redirected_total") for c in relays])
            assert redirected >= sum(url != expected[i] for i, url in enumerate(entries))
        # the views are gone: the relays release their primitives after the grace period
        await eventually(
            lambda: primitives_by_relay(publisher),
            lambda held: not any(held.values()),
            timeout=60,
            what="every primitive released",
        )
    # the publisher holds the same primitives at the same relays, wherever subscribers entered
    assert by_entry["all at r0"] == by_entry["round robin"]
    assert set(by_entry["round robin"]) == owners
    # relays of a map plan with fit widening by default: one primitive per view here (the
    # views are far apart), each fitted to its view, where tiles would take several
    assert sum(by_entry["round robin"].values()) == len(BOXES)
    logged = (tmp_path / "relay-r0.log").read_text(errors="replace")
    assert "(fit widening, margin 0.075; " in logged


def last_logged(tmp_path: Path, epoch: int) -> int:
    """The last seq of ``agents`` the module's publisher logged in ``epoch``."""
    return last_seq(tmp_path, epoch)


async def test_a_killed_relays_parts_move_within_a_lease_and_its_every_subscribers_lose_nothing(
    children: Children, publisher: Child, registry: str, relays: list[Child], tmp_path: Path
) -> None:
    await members_seen(relays, len(NAMES))
    owners = [the_map(relays).owner_of("agents", box).name for box in BOXES]
    victim = max(NAMES, key=owners.count)
    dead = NAMES.index(victim)
    survivors = [c for n, c in zip(NAMES, relays, strict=True) if n != victim]
    mine = [box for box, owner in zip(BOXES, owners, strict=True) if owner == victim]
    followers = [Follower(box) for box in mine]
    for i, follower in enumerate(followers):  # entering at the others, sent to the victim
        await follower.attach(survivors[i % len(survivors)].url)
        assert follower.relay == relays[dead].url
    # A latest-mode subscriber of a surviving relay, to show it is served throughout.
    other = next(box for box, owner in zip(BOXES, owners, strict=True) if owner != victim)
    async with connect_cluster(survivors[0].url) as bystanders:
        bystander = await bystanders.subscribe(other, rate=20)
        await asyncio.gather(
            *(f.reached(f.updates[-1].seq + 3 if f.updates else 3) for f in followers)
        )
        relays[dead].kill()  # SIGKILL: no goodbye, its lease runs out
        await relays[dead].process.wait()
        killed = time.monotonic()
        await members_seen(survivors, len(NAMES) - 1)
        moved_after = time.monotonic() - killed
        survivors_map = the_map(relays, set(NAMES) - {victim})
        for i, follower in enumerate(followers):
            await follower.detach()
            assert follower.failures, "the kill did not reach the subscriber"
            await follower.attach(survivors[(i + 1) % len(survivors)].url)
            assert follower.relay == survivors_map.owner_of("agents", follower.box).url
        target = last_logged(tmp_path, followers[0].updates[0].epoch) + 3
        await asyncio.gather(*(f.reached(target) for f in followers))
        before = bystander.tick
        await asyncio.wait_for(bystander.wait_updates(3), 120)
        assert bystander.error is None and bystander.tick > before
    # within a lease, plus the beats that read it and a loaded machine's slack
    assert moved_after < LEASE + 15, moved_after
    with SqliteLog(tmp_path / "publisher" / "log.db") as stored:
        for follower in followers:
            await follower.detach()
            assert follower.view is not None and follower.view.gaps == 0
            report = audit(
                follower.updates,
                follower.box,
                key="id",
                index=("x", "y"),
                log=stored,
                dataset="agents",
            )
            assert report.clean, report.problems
            assert (report.lost, report.duplicated, report.reordered) == (0, 0, 0)
            assert report.delivered >= 6
    # Restarted under its name (on its port), it is back in the map and responsible again.
    port = int(relays[dead].url.rsplit(":", 1)[1])
    relays[dead] = await _relay(children, publisher, registry, victim, tmp_path, port=port)
    await members_seen(relays, len(NAMES))
    async with connect_cluster(survivors[0].url) as again:
        view = await again.subscribe(mine[0], rate=20)
        assert again.relay_of(view) == relays[dead].url


async def test_fanout_subscribe_follows_a_redirect(relays: list[Child]) -> None:
    await members_seen(relays, len(NAMES))
    box = BOXES[0]
    owner = the_map(relays).owner_of("agents", box).url
    entry = next(child.url for child in relays if child.url != owner)
    lo, hi = box.bounds().lo, box.bounds().hi
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "fanout",
        "subscribe",
        "--relay",
        entry,
        "--box",
        f"{lo[0]},{lo[1]},{hi[0]},{hi[1]}",
        "--count",
        "2",
        "--json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    assert f"redirected to relay {owner}" in err.decode()
    assert len(out.decode().splitlines()) == 2


# -- the forward policy (deliverables 2, 4, 6): the subscriber's connection stays -----------

FORWARDERS = ("f0", "f1")
#: Boxes across the world, some straddling the 512-unit lines, so that each relay's views need
#: parts both relays are responsible for.
SPREAD = [*BOXES, Box((440, 440), (580, 580)), Box((440, 100), (580, 240))]


@pytest.fixture(scope="module")
def forward_registry() -> Iterator[str]:
    """A map of its own for the forwarding relays (the redirecting ones have theirs)."""
    with throwaway_redis_cluster() as nodes:
        host, port = nodes[0]
        yield f"redis://{host}:{port}"


async def _forwarder(
    children: Children, publisher: Child, registry: str, name: str, tmp_path: Path
) -> Child:
    args = ["--publisher", publisher.url, "--port", "0", "--name", name, "--grace", "1"]
    args += ["--registry", registry, "--registry-lease", str(LEASE), "--log-level", "info"]
    args += ["--registry-policy", "forward"]
    return await children.start("relay", args, tmp_path / f"relay-{name}.log")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def forwarders(
    children: Children, publisher: Child, forward_registry: str, tmp_path: Path
) -> AsyncIterator[list[Child]]:
    starting = (_forwarder(children, publisher, forward_registry, n, tmp_path) for n in FORWARDERS)
    async with started_together(*starting) as started:
        yield started


async def test_forwarding_keeps_the_connection_and_serves_the_flat_relays_rows_tick_for_tick(
    publisher: Child, relay: Child, forwarders: list[Child]
) -> None:
    await members_seen(forwarders, len(FORWARDERS))
    for entry in forwarders:  # all subscribers at one relay, then all at the other
        async with connect(entry.url) as here, connect(relay.url) as flat_side:
            forwarded = [Recorder(await here.subscribe(box, rate=100)) for box in SPREAD]
            flat = [Recorder(await flat_side.subscribe(box, rate=100)) for box in SPREAD]
            await until(forwarded + flat, 10)
            for recorder in forwarded + flat:
                await recorder.stop()
            assert all(r.view.error is None for r in forwarded), "no redirect, no error"
            if entry is forwarders[0]:  # f0 forwards f1's parts to f1
                assert await metric(entry.url, "fanout_relay_forwarded_primitives") > 0
                assert await metric(entry.url, "fanout_relay_assembled_total") > 0
            else:  # f1 forwards to no relay named before it (no circle of waits)
                assert await metric(entry.url, "fanout_relay_forwarded_primitives") == 0
            # f0's views: parts at both relays; f1's: all at f1 (f0 serves it nothing)
            expected = set(FORWARDERS) if entry is forwarders[0] else {FORWARDERS[1]}
            await eventually(
                lambda: primitives_by_relay(publisher),
                lambda now, expected=expected: {n for n in FORWARDERS if now.get(n)} == expected,
                timeout=60,
                what=f"primitives at {sorted(expected)}",
            )
            # The publisher holds at the entry relay only what it does not forward: the parts
            # forwarded come from the other relay, which alone holds them upstream.
            name = FORWARDERS[forwarders.index(entry)]

            async def upstream_of_entry(name: str = name, url: str = entry.url) -> tuple:
                at_publisher = (await primitives_by_relay(publisher)).get(name, 0)
                mine = await metric(url, "fanout_relay_primitives")
                return at_publisher, mine - await metric(url, "fanout_relay_forwarded_primitives")

            await eventually(
                upstream_of_entry,
                lambda pair: pair[0] == pair[1],
                timeout=60,
                what="the publisher holding only the entry relay's own parts there",
            )
        for a, b in zip(flat, forwarded, strict=True):
            at_flat, here_states = states(a.updates), states(b.updates)
            common = sorted(set(at_flat) & set(here_states))
            assert len(common) >= 6, (sorted(at_flat)[-5:], sorted(here_states)[-5:])
            for tick in common:
                assert here_states[tick] == at_flat[tick], f"tick {tick} differs in {b.view}"
        assert any(states(r.updates)[t] for r in flat for t in states(r.updates))
        await eventually(
            lambda: primitives_by_relay(publisher),
            lambda now: not any(now.get(n, 0) for n in FORWARDERS),
            timeout=60,
            what="every primitive released",
        )


async def test_forwarding_takes_topic_filters_from_the_relay_responsible_for_them(
    publisher: Child, relay: Child, forwarders: list[Child]
) -> None:
    """A keyed dataset's part is forwarded as a region's is: topic filters f1 is responsible
    for, subscribed at f0, come from f1, and their rows are a flat relay's tick for tick."""
    await members_seen(forwarders, len(FORWARDERS))
    entry = forwarders[0]
    owners = ResponsibilityMap({n: c.url for n, c in zip(FORWARDERS, forwarders, strict=True)})
    filters = [topic(f"zone/{n}/#") for n in range(40)]
    theirs = [f for f in filters if owners.owner_of("sensors", f).name == FORWARDERS[1]][:3]
    assert theirs

    def readings(value: float) -> list[dict[str, object]]:
        return [{"topic": f"zone/{n}/t", "value": value} for n in range(40)]

    async with open_producer(publisher.url) as producer:
        await producer.publish("sensors", rows=readings(0.0))
        async with connect(entry.url) as here, connect(relay.url) as flat_side:
            # Compared tick for tick: confirmed rows (producer writes reach latest views before
            # their tick, at each relay as the publisher passes them).
            forwarded = [
                Recorder(await here.subscribe(f, "sensors", 100.0, confirmed=True)) for f in theirs
            ]
            flat = [
                Recorder(await flat_side.subscribe(f, "sensors", 100.0, confirmed=True))
                for f in theirs
            ]
            for value in range(1, 9):
                await producer.publish("sensors", rows=readings(float(value)))
                await asyncio.sleep(0.3)

            def last_values() -> list[set[object]]:
                return [
                    {row["value"] for row in by_tick[max(by_tick)].values()} if by_tick else set()
                    for by_tick in (states(r.updates, "topic") for r in forwarded + flat)
                ]

            await eventually(
                last_values,
                lambda values: all(v == {8.0} for v in values),
                timeout=120,
                every=0.5,
                what="every view at the last reading",
            )
            assert await metric(entry.url, "fanout_relay_forwarded_primitives") >= len(theirs)
            for recorder in forwarded + flat:
                await recorder.stop()
            assert all(r.view.error is None for r in forwarded), "no redirect, no error"
    for a, b in zip(flat, forwarded, strict=True):
        at_flat, here_states = states(a.updates, "topic"), states(b.updates, "topic")
        common = sorted(set(at_flat) & set(here_states))
        assert len(common) >= 2, (sorted(at_flat), sorted(here_states))
        for tick in common:
            assert here_states[tick] == at_flat[tick], f"tick {tick} differs in {b.view}"


async def test_every_mode_through_forwarding_loses_nothing_when_the_responsible_relay_dies(
    publisher: Child, forwarders: list[Child], tmp_path: Path
) -> None:
    await members_seen(forwarders, len(FORWARDERS))
    entry, other = forwarders
    owners = ResponsibilityMap({n: c.url for n, c in zip(FORWARDERS, forwarders, strict=True)})
    theirs = [box for box in SPREAD if owners.owner_of("agents", box).name == FORWARDERS[1]]
    assert theirs
    followers = [Follower(box) for box in theirs[:4]]
    for follower in followers:
        await follower.attach(entry.url)  # connect_cluster: no redirect under forward
        assert follower.relay == entry.url
    await asyncio.gather(*(f.reached(f.updates[-1].seq + 3 if f.updates else 3) for f in followers))
    other.kill()
    await other.process.wait()
    await members_seen([entry], 1)
    target = last_logged(tmp_path, followers[0].updates[0].epoch) + 5
    await asyncio.gather(*(f.reached(target) for f in followers))
    assert not any(f.failures for f in followers), "the subscribers' connections stayed"
    assert await metric(entry.url, "fanout_relay_peer_links") == 0
    with SqliteLog(tmp_path / "publisher" / "log.db") as stored:
        for follower in followers:
            await follower.detach()
            report = audit(
                follower.updates,
                follower.box,
                key="id",
                index=("x", "y"),
                log=stored,
                dataset="agents",
            )
            assert (report.lost, report.duplicated, report.reordered) == (0, 0, 0), report.problems
            assert report.delivered >= 5
