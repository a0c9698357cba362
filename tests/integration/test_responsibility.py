"""Four relays sharing a map of responsibility in a real Redis Cluster, with a real Spark
publisher (issue 27, deliverable 2 and its tests): started once for the module, as a user would
(``fanout relay --registry redis://...``).

Subscribers enter at any relay (round robin, as a load balancer spreads them) through
``fanout.client.cluster`` and are redirected to the relay the map makes responsible for their
view's cell; the publisher then holds the same primitives at the same relays whichever relay they
entered at. A relay killed with SIGKILL leaves the map within a lease; its ``every``
subscribers resume through a surviving relay, are redirected to the cell's new owner, and lose,
duplicate and reorder nothing (``fanout.testing.audit`` against the publisher's log), while the
other relays' subscribers are served throughout; restarted under its name, it is back in the map.

Two more relays share a third map to split and merge on load (deliverable 3): past its
threshold of subscriptions the giver hands about half its cells to a standby, whose
subscribers move there (``every`` views resumed, audited: nothing lost, duplicated or
reordered; ``latest`` views equal to a flat relay's at every tick), and hand them back when the
standby falls below its merge threshold; the standby killed in the middle of a split leaves
every subscriber served once it has resumed at the giver. HTTP streams move too: a page's
``EventSource`` streams in headless Chromium and a Python client's NDJSON stream, in cells a
split moves, go on at the standby (``every`` ones audited), in a map and relays of their own.
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
from tests.integration.test_tiers import Recorder, states, until

from fanout.client import LiveView, SubscriptionError, Update, connect
from fanout.client.cluster import ClusterSubscriber, connect_cluster
from fanout.client.publisher import open_producer
from fanout.launch import Child, start
from fanout.metrics import scrape
from fanout.publisher.log import SqliteLog
from fanout.relay.cluster.responsibility import ResponsibilityMap
from fanout.testing.audit import audit
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
async def publisher(tmp_path: Path) -> AsyncIterator[Child]:
    """``fanout publisher`` serving 2,000 agents at 10 ticks/s and a topic dataset."""
    config = tmp_path / "fanout.toml"
    config.write_text(CONFIG)
    args = ["--config", str(config), "--port", "0", "--state-dir", str(tmp_path / "publisher")]
    child = await start("publisher", [*args, "--log-level", "info"], tmp_path / "publisher.log")
    try:
        yield child
    finally:
        await child.stop()


@pytest.fixture(scope="module")
def registry() -> Iterator[str]:
    with throwaway_redis_cluster() as nodes:
        host, port = nodes[0]
        yield f"redis://{host}:{port}"


async def _relay(publisher: Child, registry: str, name: str, tmp_path: Path, port: int) -> Child:
    args = ["--publisher", publisher.url, "--port", str(port), "--name", name, "--grace", "1"]
    args += ["--registry", registry, "--registry-lease", str(LEASE), "--log-level", "info"]
    return await start("relay", args, tmp_path / f"relay-{name}.log")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def relays(publisher: Child, registry: str, tmp_path: Path) -> AsyncIterator[list[Child]]:
    """Four relays in the map; a test may replace one with its restarted self."""
    started = await asyncio.gather(
        *(_relay(publisher, registry, name, tmp_path, 0) for name in NAMES),
        return_exceptions=True,
    )
    children = [child for child in started if isinstance(child, Child)]
    try:
        for failed in started:
            if isinstance(failed, BaseException):
                raise failed
        yield children
    finally:
        for child in children:
            await child.stop()


def the_map(relays: list[Child], alive: set[str] | None = None) -> ResponsibilityMap:
    """The map as the relays should read it (names -> URLs of the live ones)."""
    alive = set(NAMES) if alive is None else alive
    return ResponsibilityMap({n: c.url for n, c in zip(NAMES, relays, strict=True) if n in alive})


async def metric(url: str, name: str) -> float:
    return (await asyncio.to_thread(scrape, url)).get(name, 0.0)


async def members_seen(relays: list[Child], count: int) -> None:
    """Wait until every given relay's map holds ``count`` members."""
    for child in relays:
        await eventually(
            lambda child=child: metric(child.url, "fanout_relay_registry_members"),
            lambda members: members == count,
            timeout=60,
            every=0.2,
            what=f"{count} members in {child.url}'s map",
        )


async def primitives_by_relay(publisher: Child) -> dict[str, float]:
    samples = await asyncio.to_thread(scrape, publisher.url)
    held: dict[str, float] = {}
    for name, value in samples.items():
        if name.startswith("fanout_publisher_relay_primitives{"):
            relay = name.split('name="', 1)[1].split('"', 1)[0]
            held[relay] = held.get(relay, 0.0) + value
    return held


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


class Follower:
    """One ``every`` subscriber of one box, across its connections (resumed with its view)."""

    def __init__(self, box: Box) -> None:
        self.box = box
        self.view: LiveView | None = None
        self.relay = ""
        self.cluster: ClusterSubscriber | None = None
        self.updates: list[Update] = []
        self.failures: list[SubscriptionError] = []
        self._stack: contextlib.AsyncExitStack | None = None
        self._task: asyncio.Task[None] | None = None

    async def attach(self, entry: str) -> None:
        """Enter the cluster at ``entry`` and subscribe, resuming where the last view stopped."""
        await self.detach()
        self._stack = contextlib.AsyncExitStack()
        cluster: ClusterSubscriber = await self._stack.enter_async_context(connect_cluster(entry))
        self.cluster = cluster
        self.view = await cluster.subscribe(self.box, mode="every", resume=self.view)
        self.relay = cluster.relay_of(self.view)
        self._task = asyncio.create_task(self._drain(self.view))

    async def _drain(self, view: LiveView) -> None:
        try:
            async for update in view:
                self.updates.append(update)
        except SubscriptionError as exc:
            self.failures.append(exc)  # its relay died: the test resumes it elsewhere

    def serving(self) -> str:
        """The URL of the relay serving the view now ("moving" while it moves)."""
        try:
            assert self.cluster is not None and self.view is not None
            return self.cluster.relay_of(self.view)
        except KeyError:
            return "moving"

    async def detach(self) -> None:
        if self._stack is not None:
            with contextlib.suppress(OSError, SubscriptionError):
                await self._stack.aclose()
            self._stack = None
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self._task, 30)
            self._task = None

    async def reached(self, seq: int) -> None:
        await eventually(
            lambda: self.updates[-1].seq if self.updates else -1,
            lambda last: last >= seq,
            timeout=180,
            every=0.2,
            what=f"{self.box} past seq {seq}",
        )


def last_logged(tmp_path: Path, epoch: int) -> int:
    with SqliteLog(tmp_path / "publisher" / "log.db") as stored:
        bounds = stored.bounds("agents", epoch)
    assert bounds is not None
    return bounds[1]


async def test_a_killed_relays_parts_move_within_a_lease_and_its_every_subscribers_lose_nothing(
    publisher: Child, registry: str, relays: list[Child], tmp_path: Path
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
    relays[dead] = await _relay(publisher, registry, victim, tmp_path, port)
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


async def _forwarder(publisher: Child, registry: str, name: str, tmp_path: Path) -> Child:
    args = ["--publisher", publisher.url, "--port", "0", "--name", name, "--grace", "1"]
    args += ["--registry", registry, "--registry-lease", str(LEASE), "--log-level", "info"]
    args += ["--registry-policy", "forward"]
    return await start("relay", args, tmp_path / f"relay-{name}.log")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def forwarders(
    publisher: Child, forward_registry: str, tmp_path: Path
) -> AsyncIterator[list[Child]]:
    started = await asyncio.gather(
        *(_forwarder(publisher, forward_registry, n, tmp_path) for n in FORWARDERS),
        return_exceptions=True,
    )
    children = [child for child in started if isinstance(child, Child)]
    try:
        for failed in started:
            if isinstance(failed, BaseException):
                raise failed
        yield children
    finally:
        for child in children:
            await child.stop()


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
            forwarded = [Recorder(await here.subscribe(f, "sensors", 100.0)) for f in theirs]
            flat = [Recorder(await flat_side.subscribe(f, "sensors", 100.0)) for f in theirs]
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


# -- HTTP streams move with their part in a split (deliverable 3; docs/http.md) -------------
# A section of its own, with a map and relays of its own started for its one test (function
# scope): a split on load whose moving cells hold HTTP streams. Its imports are local to it.

#: The giver splits past 7 subscriptions; two cells of two subscriptions each move (a split
#: takes the heaviest parts first while they fit in half the load, ``relay.cluster.balance``
#: rule 4) and four cells of one stay.
HTTP_MOVING = {"page": BOXES[0], "python": BOXES[3]}
HTTP_STAYING = [BOXES[1], BOXES[4], BOXES[6], BOXES[9]]
HTTP_DWELL = 4.0
#: The page's script: an EventSource per stream, every event it dispatches kept in order.
FOLLOW_IN_PAGE = """
window.seen = window.seen || {};
window.follow = (name, view, mode) => {
  const url = new URL("/v1/subscribe", location.origin);
  const query = {dataset: "agents", view, mode, format: "sse"};
  if (mode === "latest") query.rate = "20";
  url.search = new URLSearchParams(query);
  const events = (window.seen[name] = []);
  const source = new EventSource(url);
  for (const type of ["subscribed", "push", "no_update", "moved", "error", "open"]) {
    source.addEventListener(type, (m) => events.push({type, data: m.data ?? null}));
  }
  return url.href;
};
"""


@pytest_asyncio.fixture(loop_scope="module")
async def http_movers(publisher: Child, tmp_path: Path) -> AsyncIterator[list[Child]]:
    """A giver splitting past 7 subscriptions for a dwell, and a standby, in a map of their
    own; stopped when the test ends."""
    with throwaway_redis_cluster() as nodes:
        host, port = nodes[0]
        common = ["--publisher", publisher.url, "--port", "0", "--grace", "1"]
        common += ["--registry", f"redis://{host}:{port}", "--registry-lease", str(LEASE)]
        common += ["--log-level", "info"]
        giver = ["--name", "hg", "--split-above", "subscribers=7"]
        giver += ["--split-dwell", str(HTTP_DWELL)]
        started = await asyncio.gather(
            start("relay", [*common, *giver], tmp_path / "relay-hg.log"),
            start("relay", [*common, "--name", "hs", "--standby"], tmp_path / "relay-hs.log"),
            return_exceptions=True,
        )
        children = [child for child in started if isinstance(child, Child)]
        try:
            for failed in started:
                if isinstance(failed, BaseException):
                    raise failed
            yield children
        finally:
            for child in children:
                await child.stop()


def _http(child: Child) -> str:
    return child.url.replace("ws://", "http://")


def _stream_url(child: Child, box: Box, mode: str) -> str:
    import urllib.parse

    query = {"dataset": "agents", "view": str(box), "mode": mode}
    if mode == "latest":
        query["rate"] = "20"
    return f"{_http(child)}/v1/subscribe?{urllib.parse.urlencode(query)}"


async def _page_events(page: object, name: str) -> list[dict[str, object]]:
    """What the page's stream ``name`` dispatched, each event's data read into it."""
    import json

    raw = await page.evaluate(f"JSON.stringify(window.seen[{json.dumps(name)}])")  # type: ignore[attr-defined]
    return [
        {"type": e["type"], **(json.loads(e["data"]) if e["data"] else {})} for e in json.loads(raw)
    ]


def _after_moved(events: list[dict]) -> list[dict]:
    """The events after the first ``moved`` one (none before it has come)."""
    types = [e["type"] for e in events]
    return events[types.index("moved") + 1 :] if "moved" in types else []


async def test_http_streams_move_with_their_part_in_a_split_and_lose_nothing(
    http_movers: list[Child], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A page's two EventSource streams (``every``, ``latest``) in headless Chromium and a
    Python client's ``every`` NDJSON stream, in the two cells that move: the page does nothing
    (the browser reconnects by itself, is redirected and resumes with ``Last-Event-ID``), the
    Python client follows the documented procedure (``fanout.testing.httpstream``). The
    ``every`` streams, audited against the log across the move, lose, duplicate and reorder
    nothing; the ``latest`` one equals the ``every`` one at every tick it shows; the moved
    streams end up at the standby; a stream whose cell stayed is not disturbed."""
    import json

    import httpx

    from fanout.testing.browser import open_browser
    from fanout.testing.httpstream import Following, updates_of

    giver, standby = http_movers
    await members_seen(http_movers, 2)
    page_box, python_box = HTTP_MOVING["page"], HTTP_MOVING["python"]
    directory = tmp_path_factory.mktemp("browser")
    async with (
        open_browser(f"{_http(giver)}/v1/datasets", directory) as page,
        httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as client,
        connect_cluster(giver.url) as ballast,
        contextlib.AsyncExitStack() as streams,
    ):
        await page.evaluate(FOLLOW_IN_PAGE)
        for mode in ("every", "latest"):  # each stream named by its mode
            await page.evaluate(f"window.follow(...{json.dumps([mode, str(page_box), mode])})")
        moving = Following(_stream_url(giver, python_box, "every"))
        staying = Following(_stream_url(giver, HTTP_STAYING[0], "latest"))
        for stream in (moving, staying):
            stream.task = asyncio.create_task(stream.run(client))
            streams.push_async_callback(stream.stop)
        views = [await ballast.subscribe(b, rate=20) for b in (python_box, *HTTP_STAYING[1:-1])]
        # Seven subscriptions, not past 7: the every streams are served before the eighth.
        await eventually(
            lambda: _page_events(page, "every"),
            lambda events: len([e for e in events if "seq" in e]) >= 3,
            timeout=120,
            every=0.2,
            what="the page's every stream served",
        )
        await eventually(
            lambda: [e for e in moving.checked() if "seq" in e],
            lambda served: len(served) >= 3,
            timeout=120,
            every=0.2,
            what="the NDJSON stream served",
        )
        views.append(await ballast.subscribe(HTTP_STAYING[-1], rate=20))
        assert {ballast.relay_of(view) for view in views} == {giver.url}  # a standby owns nothing
        # Eight, past 7 for a dwell: the two cells of two subscriptions go to the standby.
        every = await eventually(
            lambda: _page_events(page, "every"),
            lambda events: len([e for e in _after_moved(events) if "seq" in e]) >= 3,
            timeout=120,
            every=0.2,
            what="the page's every stream moved and served at the standby",
        )
        await eventually(
            lambda: [e for e in _after_moved(moving.checked()) if "seq" in e],
            lambda served: len(served) >= 3,
            timeout=120,
            every=0.2,
            what="the NDJSON stream moved and served at the standby",
        )
        assert await metric(giver.url, "fanout_relay_splits_total") == 1
        # Past the log's end as it is now: the streams are served well after the move.
        target = last_logged(tmp_path, next(e["epoch"] for e in every if "epoch" in e)) + 3
        every = await eventually(
            lambda: _page_events(page, "every"),
            lambda events: max(e.get("seq", -1) for e in events) >= target,
            timeout=120,
            every=0.2,
            what=f"the page's every stream past seq {target}",
        )
        await eventually(
            lambda: max(e.get("seq", -1) for e in moving.checked()),
            lambda seq: seq >= target,
            timeout=120,
            every=0.2,
            what=f"the NDJSON stream past seq {target}",
        )
        latest = await eventually(
            lambda: _page_events(page, "latest"),
            lambda events: len([e for e in _after_moved(events) if e["type"] == "push"]) >= 3,
            timeout=120,
            every=0.2,
            what="the page's latest stream served after the move",
        )
        # Where the streams are: the page's two, the NDJSON one and a ballast view at the
        # standby, the NDJSON stream that stayed and three ballast views at the giver.
        held = [await metric(c.url, "fanout_relay_subscriptions") for c in (standby, giver)]
        assert held == [4, 4]
        await asyncio.wait_for(ballast.settled(), 60)
        assert ballast.relay_of(views[0]) == standby.url
        assert {ballast.relay_of(view) for view in views[1:]} == {giver.url}
        staying_ticks = [e["tick"] for e in staying.checked() if e["type"] == "push"]

    # The page's every stream: one move, told where and why, served there, nothing lost.
    moved = [e for e in every if e["type"] == "moved"]
    assert len(moved) == 1, moved
    assert moved[0]["location"].startswith(f"{_http(standby)}/v1/subscribe?")
    assert "moved to relay hs" in moved[0]["message"]
    before = every[: every.index(moved[0])]
    assert moved[0]["token"] == [e["token"] for e in before if "token" in e][-1]
    assert [e["type"] for e in every].count("subscribed") == 2  # once at each relay
    # The NDJSON stream: the same, by hand; its second response came from the standby.
    assert len(moving.served_at) == 2
    assert moving.served_at[0].startswith(_http(giver))
    assert moving.served_at[1].startswith(_http(standby))
    with SqliteLog(tmp_path / "publisher" / "log.db") as stored:
        for box, updates in ((page_box, updates_of(every)), (python_box, moving.updates())):
            report = audit(updates, box, key="id", index=("x", "y"), log=stored, dataset="agents")
            assert (report.lost, report.duplicated, report.reordered) == (0, 0, 0), report.problems
            assert report.clean and report.restarts == 0, report.problems
            assert report.delivered >= 6
    # The latest stream: the browser's own error events (no data) while it reconnects, then a
    # full push at the standby; the every stream's rows at every tick both show, both sides of
    # the move.
    assert all(len(e) == 1 for e in every + latest if e["type"] == "error")
    again = [e["type"] for e in _after_moved(latest) if e["type"] != "error"]
    assert again[:3] == ["open", "subscribed", "push"]
    first_there = next(e for e in _after_moved(latest) if e["type"] == "push")
    assert first_there["full"]
    shown, truth = states(updates_of(latest)), states(updates_of(every))
    common = sorted(set(shown) & set(truth))
    assert any(t < first_there["tick"] for t in common)
    assert any(t >= first_there["tick"] for t in common)
    for tick in common:
        assert shown[tick] == truth[tick], f"tick {tick} differs"
    # The stream whose cell stayed: one response, no move, pushes after the others moved.
    assert len(staying.served_at) == 1 and staying.served_at[0].startswith(_http(giver))
    assert [e["type"] for e in staying.events].count("subscribed") == 1
    assert "moved" not in [e["type"] for e in staying.events]
    assert max(staying_ticks) > first_there["tick"]


# -- split and merge on load (deliverable 3): the subscribers move with their parts ---------

SPLITTERS = ("g0", "g1")
SPLIT_DWELL = 4.0
#: Ten views in ten cells: the giver splits past 7 subscriptions (five cells go), the standby
#: hands its cells back below 3.
SPLIT_BOXES = BOXES[:10]


@pytest.fixture(scope="module")
def split_registry() -> Iterator[str]:
    """A map of its own for the relays that split and merge."""
    with throwaway_redis_cluster() as nodes:
        host, port = nodes[0]
        yield f"redis://{host}:{port}"


async def _splitter(
    publisher: Child, registry: str, name: str, tmp_path: Path, *extra: str
) -> Child:
    args = ["--publisher", publisher.url, "--port", "0", "--name", name, "--grace", "1"]
    args += ["--registry", registry, "--registry-lease", str(LEASE), "--log-level", "info"]
    args += ["--split-above", "subscribers=7", "--merge-below", "subscribers=3"]
    args += ["--split-dwell", str(SPLIT_DWELL), *extra]
    return await start("relay", args, tmp_path / f"relay-{name}.log")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def splitters(
    publisher: Child, split_registry: str, tmp_path: Path
) -> AsyncIterator[list[Child]]:
    """The giver and a standby (``--standby``: it owns nothing until a split)."""
    started = await asyncio.gather(
        _splitter(publisher, split_registry, SPLITTERS[0], tmp_path),
        _splitter(publisher, split_registry, SPLITTERS[1], tmp_path, "--standby"),
        return_exceptions=True,
    )
    children = [child for child in started if isinstance(child, Child)]
    try:
        for failed in started:
            if isinstance(failed, BaseException):
                raise failed
        yield children
    finally:
        for child in children:
            await child.stop()


def audited(followers: list[Follower], tmp_path: Path, at_least: int) -> None:
    """Every follower's updates against the publisher's log: nothing lost, duplicated or
    reordered, across its moves."""
    with SqliteLog(tmp_path / "publisher" / "log.db") as stored:
        for follower in followers:
            assert follower.view is not None and follower.view.gaps == 0
            report = audit(
                follower.updates,
                follower.box,
                key="id",
                index=("x", "y"),
                log=stored,
                dataset="agents",
            )
            assert (report.lost, report.duplicated, report.reordered) == (0, 0, 0), report.problems
            assert report.delivered >= at_least


async def test_a_split_on_load_and_a_merge_move_subscribers_losing_nothing(
    publisher: Child, relay: Child, splitters: list[Child], tmp_path: Path
) -> None:
    await members_seen(splitters, len(SPLITTERS))
    giver, standby = splitters
    followers = [Follower(box) for box in SPLIT_BOXES[:6]]
    for follower in followers:
        await follower.attach(standby.url)  # a standby owns nothing: sent to the giver
        assert follower.relay == giver.url
    async with connect_cluster(standby.url) as latest_side, connect(relay.url) as flat_side:
        latest = [Recorder(await latest_side.subscribe(box, rate=20)) for box in SPLIT_BOXES[6:]]
        flat = [Recorder(await flat_side.subscribe(box, rate=20)) for box in SPLIT_BOXES[6:]]

        def serving() -> list[str]:
            at = [follower.serving() for follower in followers]
            for recorder in latest:
                try:
                    at.append(latest_side.relay_of(recorder.view))
                except KeyError:
                    at.append("moving")
            return at

        assert set(serving()) == {giver.url}
        # Ten subscriptions, past 7 for a dwell: five of the ten cells go to the standby.
        where = await eventually(
            serving,
            lambda at: at.count(standby.url) == 5 and at.count(giver.url) == 5,
            timeout=90,
            every=0.2,
            what="five views moved to the standby",
        )
        assert await metric(giver.url, "fanout_relay_splits_total") == 1
        await eventually(
            lambda: primitives_by_relay(publisher),
            lambda held: held.get(SPLITTERS[1], 0) > 0,
            timeout=60,
            what="the standby acquiring its cells",
        )
        await asyncio.gather(*(f.reached(0) for f in followers))  # served, wherever they are
        target = last_logged(tmp_path, followers[0].updates[0].epoch) + 3
        await asyncio.gather(*(f.reached(target) for f in followers))
        await until(latest, max(len(r.updates) for r in latest) + 3)
        # Below 3 at the standby: keep two of its views, close the others; after a dwell it
        # hands its cells back and the two views move back to the giver.
        moved = [i for i, url in enumerate(where) if url == standby.url]
        kept, closing = moved[:2], moved[2:]
        for i in closing:
            if i < len(followers):
                await followers[i].detach()
            else:
                await latest[i - len(followers)].view.close()
        back = await eventually(
            serving,
            lambda at: all(at[i] == giver.url for i in kept),
            timeout=90,
            every=0.2,
            what="the kept views back at the giver",
        )
        assert await metric(standby.url, "fanout_relay_merges_total") == 1
        still_open = [url for i, url in enumerate(back) if i not in closing]
        assert still_open == [giver.url] * 7
        merged_at = max(r.updates[-1].tick for r in flat)
        target = last_logged(tmp_path, followers[0].updates[0].epoch) + 3
        await asyncio.gather(*(f.reached(target) for i, f in enumerate(followers) if i in kept))
        await eventually(
            lambda: [r.updates[-1].tick for r in latest if not r.view._closed],
            lambda ticks: all(tick > merged_at + 3 for tick in ticks),
            timeout=120,
            every=0.2,
            what="the latest views' ticks after the merge",
        )
        for recorder in latest + flat:
            await recorder.stop()
        for moving, still in zip(latest, flat, strict=True):
            here, there = states(moving.updates), states(still.updates)
            common = sorted(set(here) & set(there))
            assert len(common) >= 3
            for tick in common:
                assert here[tick] == there[tick], f"tick {tick} differs in {moving.view.view}"
            if not moving.view._closed:  # served across both moves: equal after them too
                assert any(tick > merged_at for tick in common)
    for follower in followers:
        await follower.detach()
    audited(followers, tmp_path, at_least=6)
    assert all(followers[i].view.moves == 2 for i in kept if i < len(followers))  # type: ignore[union-attr]
    await eventually(
        lambda: primitives_by_relay(publisher),
        lambda held: not held.get(SPLITTERS[1], 0),
        timeout=60,
        what="the standby releasing what it acquired",
    )


async def test_the_standby_killed_during_a_split_leaves_every_subscriber_served(
    splitters: list[Child], tmp_path: Path
) -> None:
    await members_seen(splitters, len(SPLITTERS))
    giver, standby = splitters
    await eventually(
        lambda: metric(standby.url, "fanout_relay_parts_received"),
        lambda parts: parts == 0,
        timeout=60,
        what="nothing left at the standby",
    )
    splits = await metric(giver.url, "fanout_relay_splits_total")
    followers = [Follower(box) for box in SPLIT_BOXES]
    for follower in followers:
        await follower.attach(giver.url)
    await eventually(
        lambda: metric(giver.url, "fanout_relay_splits_total"),
        lambda count: count > splits,
        timeout=90,
        every=0.1,
        what="a split",
    )
    standby.kill()  # SIGKILL while its subscribers are moving to it
    await standby.process.wait()
    await asyncio.gather(*(f.reached(0) for f in followers if not f.failures))
    await members_seen([giver], 1)  # its lease ran out: its cells are the giver's again
    await eventually(
        lambda: [f.failures or f.serving() == giver.url for f in followers],
        all,
        timeout=60,
        every=0.2,
        what="every view at the giver or ended",
    )
    # The five views the split sent to the standby ended with it (there, or on their way).
    assert sum(bool(f.failures) for f in followers) == 5
    for follower in followers:
        if follower.failures:  # it was at the standby, or on its way: resumed at the giver
            await follower.attach(giver.url)
            assert follower.relay == giver.url
    target = last_logged(tmp_path, followers[0].updates[0].epoch) + 3
    await asyncio.gather(*(f.reached(target) for f in followers))
    for follower in followers:
        await follower.detach()
    audited(followers, tmp_path, at_least=3)
