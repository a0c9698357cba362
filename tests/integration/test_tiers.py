"""Relay tiers with real processes on loopback (issue 27, deliverable 1): a Spark publisher, a
flat relay on it, and a tree publisher -> mid relay -> edge relay (``fanout relay --upstream``).

Subscribers of the edge relay get the same rows at the same ticks as subscribers of the flat
relay (mode ``latest``: compared at every tick both received), and ``every`` subscribers of the
edge relay get every seq exactly once, in order, each update exactly what that seq's logged
change makes of the view (``fanout.testing.audit`` against the publisher's log), and the same
updates as ``every`` subscribers of the flat relay — for every kind of dataset the publisher
serves: the simulation's agents (regions), a SQL table, topics, object paths and PPS objects,
fed by a producer while they are watched.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from fanout.client import LiveView, Update, connect
from fanout.client.objects import Objects
from fanout.client.publisher import PublisherClient, open_producer
from fanout.launch import Child, Children
from fanout.metrics import scrape
from fanout.publisher.log import SqliteLog
from fanout.testing.audit import audit
from fanout.testing.ports import free_port
from fanout.testing.wait import eventually
from fanout.views import Box, View
from fanout.views.objects import parse as path
from fanout.views.region import Relative, Sphere
from fanout.views.sql import parse as sql
from fanout.views.topic import parse as topic

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

BOXES = [Box((100, 100), (300, 300)), Box((250, 250), (450, 450)), Box((600, 0), (800, 250))]
#: Everything within 120 of agent 42, wherever it goes (a view relative to an entity).
FOLLOWING = Relative(42, Sphere((0, 0), 120))

#: The simulation of conftest's publisher, and a dataset of each other kind, fed by producers.
CONFIG = """
[datasets.agents]
source = { kind = "simulation", agents = 2000 }

[datasets.orders]
key = "order_id"
schema = { order_id = "long", customer = "string", amount = "double" }
index = "sql"
source = "ingest"

[datasets.sensors]
key = "topic"
schema = { topic = "string", value = "double" }
index = "topic"
source = "ingest"

[datasets.cars]
key = "path"
schema = { path = "string", state = "string", rpm = "long" }
index = "path"
source = "ingest"

[datasets.pps]
index = "objects"
source = "ingest"
"""


@dataclass(frozen=True)
class Keyed:
    """A view of a keyed dataset, with what the audit needs to know of the dataset."""

    dataset: str
    view: View
    key: str
    index: tuple[str, ...]


KEYED = [
    # NULL amounts go through the tier too (as validity, not as a column of their own)
    Keyed(
        "orders", sql("SELECT * FROM orders WHERE amount > 40 OR amount IS NULL"), "order_id", ()
    ),
    Keyed("sensors", topic("plant/+/temp"), "topic", ("topic",)),
    Keyed("cars", path("/cars/.all"), "path", ("path",)),
    Keyed("pps", path("/fleet/.all"), "cell", ("object",)),
]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def publisher(children: Children, tmp_path: Path) -> AsyncIterator[Child]:
    """``fanout publisher`` serving 2,000 agents at 10 ticks/s and the keyed datasets."""
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


async def _mid(
    children: Children, publisher: Child, tmp_path: Path, port: int, name: str = "mid"
) -> Child:
    args = ["--publisher", publisher.url, "--port", str(port), "--name", name, "--serve-relays"]
    log = tmp_path / f"relay-{name}.log"
    return await children.start("relay", [*args, "--log-level", "info"], log)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tree(children: Children, publisher: Child, tmp_path: Path) -> AsyncIterator[list[Child]]:
    """[a mid relay on the publisher, an edge relay on the mid relay]; the last test replaces
    the mid relay with its restarted self (on the same port)."""
    tree = [await _mid(children, publisher, tmp_path, free_port())]
    try:
        args = ["--upstream", tree[0].url, "--port", "0", "--name", "edge"]
        edge = await children.start(
            "relay", [*args, "--log-level", "info"], tmp_path / "relay-edge.log"
        )
        tree.append(edge)
        yield tree
    finally:
        for child in reversed(tree):
            await child.stop()


class Recorder:
    """Every update of one view, as received."""

    def __init__(self, view: LiveView) -> None:
        self.view = view
        self.updates: list[Update] = []
        self._task = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        async for update in self.view:
            self.updates.append(update)

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def states(updates: list[Update], key: str = "id") -> dict[int, dict[Any, dict[str, Any]]]:
    """The view's rows after each update, by tick."""
    rows: dict[Any, dict[str, Any]] = {}
    by_tick: dict[int, dict[Any, dict[str, Any]]] = {}
    for update in updates:
        if update.full:
            rows = {}
        for gone in update.left.tolist():
            rows.pop(gone, None)
        for columns in (update.entered, update.updated):
            names = list(columns)
            for values in zip(*(columns[n].tolist() for n in names), strict=True):
                row = dict(zip(names, values, strict=True))
                rows[row[key]] = row
        by_tick[update.tick] = dict(rows)
    return by_tick


async def until(recorders: list[Recorder], count: int, timeout: float = 300.0) -> None:
    """Wait until every recorder has ``count`` updates."""
    await eventually(
        lambda: [len(r.updates) for r in recorders],
        lambda counts: min(counts) >= count,
        timeout=timeout,
        every=0.2,
        what=f"{count} updates of every view",
    )


async def test_an_edge_relay_serves_the_same_rows_at_the_same_ticks_as_a_flat_one(
    relay: Child, tree: list[Child]
) -> None:
    _, edge = tree
    views = [*BOXES, FOLLOWING]  # the last follows an agent: the edge holds its row at the mid
    async with connect(relay.url) as flat_side, connect(edge.url) as edge_side:
        flat = [Recorder(await flat_side.subscribe(view, rate=100)) for view in views]
        tiered = [Recorder(await edge_side.subscribe(view, rate=100)) for view in views]
        await until(flat + tiered, 15)
        for recorder in flat + tiered:
            await recorder.stop()
    for view, a, b in zip(views, flat, tiered, strict=True):
        at_flat, at_edge = states(a.updates), states(b.updates)
        common = sorted(set(at_flat) & set(at_edge))
        assert len(common) >= 10, (sorted(at_flat)[-5:], sorted(at_edge)[-5:])
        for tick in common:
            flat_rows, edge_rows = at_flat[tick], at_edge[tick]
            flat_only = sorted(set(flat_rows) - set(edge_rows))
            edge_only = sorted(set(edge_rows) - set(flat_rows))
            assert edge_rows == flat_rows, (
                f"tick {tick} differs in {view}: only flat {flat_only}, only edge {edge_only}"
            )
        assert any(at_flat[tick] for tick in common)  # the views hold agents


async def test_every_mode_is_gapless_through_two_tiers(
    publisher: Child, relay: Child, tree: list[Child], tmp_path: Path
) -> None:
    _, edge = tree
    async with connect(relay.url) as flat_side, connect(edge.url) as edge_side:
        flat = [Recorder(await flat_side.subscribe(box, mode="every")) for box in BOXES]
        tiered = [Recorder(await edge_side.subscribe(box, mode="every")) for box in BOXES]
        await until(flat + tiered, 20)
        for recorder in flat + tiered:
            await recorder.stop()
    with SqliteLog(tmp_path / "publisher" / "log.db") as stored:
        for recorder, box in zip(tiered, BOXES, strict=True):
            assert recorder.view.gaps == 0 and recorder.view.resyncs == 0
            report = audit(
                recorder.updates, box, key="id", index=("x", "y"), log=stored, dataset="agents"
            )
            assert report.clean, report.problems
            assert report.delivered >= 20
    for a, b in zip(flat, tiered, strict=True):
        by_seq = {u.seq: u for u in a.updates if not u.full}
        common = [u for u in b.updates if u.seq in by_seq and not u.full]
        assert len(common) >= 10
        for update in common:
            other = by_seq[update.seq]
            assert _changes(update) == _changes(other), f"seq {update.seq} differs"
    # The edge relay never talked to the publisher: the mid relay forwarded its batches.
    samples = await asyncio.to_thread(scrape, publisher.url)
    sent = [name for name in samples if name.startswith("fanout_publisher_relay_bytes_sent")]
    assert any('name="mid"' in name for name in sent), sent
    assert not any('name="edge"' in name for name in sent), sent


def _changes(update: Update) -> tuple[object, ...]:
    """An update's entered, updated and left rows, comparable."""
    return (
        _rows(update.entered),
        _rows(update.updated),
        sorted(update.left.tolist()),
    )


def _rows(columns: dict[str, Any]) -> list[tuple[object, ...]]:
    names = sorted(columns)
    return sorted(zip(*(columns[n].tolist() for n in names), strict=True), key=repr)  # NULLs


async def feed(
    producer: PublisherClient, number: int, rng: random.Random, *, last: bool = False
) -> None:
    """Round ``number``: rows entering, changing in, leaving and deleted from each keyed view;
    ``last``: one row in each view that every subscriber waits for (``FINAL``)."""
    pps = Objects(None, producer, "pps")
    orders = [
        {"order_id": k, "customer": rng.choice(["ada", "bob"]), "amount": amount}
        for k in rng.sample(range(12), 4)
        for amount in [None if rng.random() < 0.2 else float(rng.randint(0, 80))]
    ]
    sensors = [
        {"topic": f"plant/{rng.randint(1, 5)}/{rng.choice(['temp', 'rpm'])}", "value": v}
        for v in (float(rng.randint(0, 99)) for _ in range(3))
    ]
    cars = [
        {"path": rng.choice(["/cars/c1", "/cars/c2", "/cars/c3", "/cars/c1/door", "/trucks/t1"]),
         "state": rng.choice(["on", "off"]), "rpm": rng.randint(0, 5000)}
    ]  # fmt: skip
    if last:
        orders = [{"order_id": DONE, "customer": "end", "amount": 99.0}]
        sensors = [{"topic": "plant/done/temp", "value": 1.0}]
        cars = [{"path": "/cars/done", "state": "end", "rpm": 0}]
    for dataset, rows, key, every, gone in (
        ("orders", orders, "order_id", 3, [rng.randint(0, 11)]),
        ("sensors", sensors, "topic", 4, [f"plant/{rng.randint(1, 5)}/temp"]),
        ("cars", cars, "path", 5, ["/cars/c2"]),
    ):
        kept = {row[key]: row for row in rows}  # one row per key, no key also deleted
        deletes = [] if last or number % every else [k for k in gone if k not in kept]
        await producer.publish(dataset, list(kept.values()), deletes=deletes)
    fleet = "/fleet/done" if last else f"/fleet/t{number % 3 + 1}"
    await pps.write(fleet, f"speed:n:{rng.randint(0, 90)}\n")
    if not last and number % 6 == 5:  # t3, written just now
        await pps.delete("/fleet/t3")


DONE = 1000  # the order every subscriber waits for
#: Updates (the first push and seqs after it) every ``every`` stream gets before the last round.
ROUNDS_SEEN = 6
FINAL = {"orders": DONE, "sensors": "plant/done/temp", "cars": "/cars/done", "pps": "/fleet/done?"}


def finished(recorder: Recorder, case: Keyed) -> bool:
    """Whether the recorder's view holds the last round's row."""
    by_tick = states(recorder.updates, case.key)
    if not by_tick:
        return False
    rows = by_tick[max(by_tick)]
    final = FINAL[case.dataset]
    return any(str(key).startswith(str(final)) for key in rows)


async def test_keyed_datasets_are_served_through_a_tier_as_by_a_flat_relay(
    publisher: Child, relay: Child, tree: list[Child], tmp_path: Path
) -> None:
    _, edge = tree
    async with open_producer(publisher.url) as producer:
        rng = random.Random(2)
        await feed(producer, 0, rng)  # every dataset has a seq before the views subscribe
        async with connect(relay.url) as flat_side, connect(edge.url) as edge_side:
            recorders: dict[tuple[str, str, str], Recorder] = {}
            for case in KEYED:
                for side, where in ((flat_side, "flat"), (edge_side, "edge")):
                    for mode in ("latest", "every"):
                        # ``latest`` asks confirmed rows: a producer's write is shown before its
                        # tick on each relay as it comes (the live path), so that the two sides'
                        # rows are compared tick by tick (the live path's own test is below).
                        view = await side.subscribe(
                            case.view, case.dataset, 100.0, mode=mode, confirmed=mode == "latest"
                        )  # type: ignore[arg-type]
                        recorders[case.dataset, where, mode] = Recorder(view)
            every = [r for (_, _, mode), r in recorders.items() if mode == "every"]
            number = 1
            # Rounds until every stream saw several seqs (a loaded machine's micro-batches
            # take in several rounds), then the last one.
            while number <= 60 and min(len(r.updates) for r in every) < ROUNDS_SEEN:
                await feed(producer, number, rng)
                await asyncio.sleep(0.3)
                number += 1
            await feed(producer, number, rng, last=True)
            await eventually(
                lambda: [
                    (name, where, mode)
                    for (name, where, mode), recorder in recorders.items()
                    if not finished(recorder, next(c for c in KEYED if c.dataset == name))
                ],
                lambda waiting: not waiting,
                timeout=180,
                every=0.5,
                what="every view holding the last round's row",
            )
            for recorder in recorders.values():
                await recorder.stop()
            # The edge relay holds every kind's primitives at the mid relay, none at the
            # publisher.
            samples = await asyncio.to_thread(scrape, tree[0].url)
            assert samples["fanout_relay_below_primitives"] >= len(KEYED)
            samples = await asyncio.to_thread(scrape, publisher.url)
            sent = [name for name in samples if name.startswith("fanout_publisher_relay_bytes")]
            assert not any('name="edge"' in name for name in sent), sent
    with SqliteLog(tmp_path / "publisher" / "log.db") as stored:
        for case in KEYED:
            flat, tiered = (
                recorders[case.dataset, "flat", "latest"],
                recorders[case.dataset, "edge", "latest"],
            )
            at_flat, at_edge = states(flat.updates, case.key), states(tiered.updates, case.key)
            common = sorted(set(at_flat) & set(at_edge))
            assert len(common) >= 2, (case.dataset, sorted(at_flat), sorted(at_edge))
            for tick in common:
                assert at_edge[tick] == at_flat[tick], f"{case.dataset}: tick {tick} differs"
            assert at_edge[max(at_edge)] == at_flat[max(at_flat)]
            following = recorders[case.dataset, "edge", "every"]
            assert following.view.gaps == 0 and following.view.resyncs == 0
            report = audit(
                following.updates, case.view, key=case.key, index=case.index, log=stored,
                dataset=case.dataset,
            )  # fmt: skip
            assert report.clean, (case.dataset, report.problems)
            assert report.delivered >= ROUNDS_SEEN, (case.dataset, report)
            other = recorders[case.dataset, "flat", "every"]
            by_seq = {u.seq: u for u in other.updates if not u.full}
            common_seqs = [u for u in following.updates if u.seq in by_seq and not u.full]
            assert len(common_seqs) >= ROUNDS_SEEN - 2, case.dataset
            for update in common_seqs:
                assert _changes(update) == _changes(by_seq[update.seq]), (case.dataset, update.seq)


async def test_a_producers_write_is_shown_at_once_on_an_edge_relay(
    publisher: Child, tree: list[Child]
) -> None:
    """Issue 40: a write made with the producer API is passed by the publisher to the mid relay
    once durable, and by the mid relay to the edge, whose ``latest`` view shows it provisionally
    before a micro-batch carries it (its ``confirmed`` view lacks it), then confirms it."""
    _, edge = tree
    async with open_producer(publisher.url) as producer, connect(edge.url) as subscriber:
        live = await subscriber.subscribe(topic("edge/#"), dataset="sensors", rate=100.0)
        confirmed = await subscriber.subscribe(
            topic("edge/#"), dataset="sensors", rate=100.0, confirmed=True
        )
        async with asyncio.timeout(90):  # a loaded machine's micro-batches
            await anext(aiter(live))  # the first, full pushes: the edge holds the filter
            await anext(aiter(confirmed))
            await producer.publish("sensors", rows=[{"topic": "edge/1", "value": 4.5}])
            shown = await anext(aiter(live))
            assert shown.provisional
            assert dict(live.rows) == {"edge/1": {"topic": "edge/1", "value": 4.5}}
            assert dict(confirmed.rows) == {}  # no micro-batch has carried it yet
            async for _ in confirmed:
                if confirmed.rows:
                    break
    assert {k: dict(r) for k, r in confirmed.rows.items()} == {
        k: dict(r) for k, r in live.rows.items()
    }
    counts = await asyncio.to_thread(scrape, edge.url)
    assert counts["fanout_relay_live_passed_total"] == 1


async def test_a_write_in_a_new_directory_is_shown_at_once_on_an_edge_holding_its_parent(
    publisher: Child, tree: list[Child]
) -> None:
    """Issue 40: writing ``/yard/new/o`` makes the directory ``/yard/new``, which the edge's
    ``/yard/.all`` view holds: the mid relay passes the write down by the paths it may change,
    as the publisher chooses (``views.objects.store.touched``), and the edge shows the new
    directory provisionally before a micro-batch carries it (its ``confirmed`` view lacks it)."""
    _, edge = tree
    async with open_producer(publisher.url) as producer, connect(edge.url) as subscriber:
        live = await subscriber.subscribe(path("/yard/.all"), dataset="pps", rate=100.0)
        confirmed = await subscriber.subscribe(
            path("/yard/.all"), dataset="pps", rate=100.0, confirmed=True
        )
        pps = Objects(None, producer, "pps")
        await pps.write("/yard/old", "v:n:0\n")  # a micro-batch: the edge's snapshot comes
        async with asyncio.timeout(90):  # a loaded machine's micro-batches
            for view in (live, confirmed):
                async for _ in view:
                    if "/yard/old?" in view.rows:
                        break
            await pps.write("/yard/new/o", "v:n:1\n")
            # The updates that brought the new directory's marker cell, each view's first
            # (a view's rows follow its pushes in the background: look at the updates).
            shown = await _bringing(live, "/yard/new?/")
            carried = await _bringing(confirmed, "/yard/new?/")
            assert shown.provisional and not carried.provisional
            assert shown.received_at <= carried.received_at  # before a micro-batch carried it
    assert set(confirmed.rows) == set(live.rows) >= {"/yard/old?", "/yard/new?/"}


async def _bringing(view: LiveView, key: str) -> Update:
    """The next update of ``view`` whose entered rows hold ``key``."""
    async for update in view:
        if key in update.entered.get(view.key, ()):
            return update
    raise AssertionError(f"{view} ended without {key}")


async def test_a_restarted_mid_relay_costs_every_mode_subscribers_of_the_edge_nothing(
    children: Children, publisher: Child, tree: list[Child], tmp_path: Path
) -> None:
    mid, edge = tree
    async with connect(edge.url) as side:
        followers = [Recorder(await side.subscribe(box, mode="every")) for box in BOXES]
        await until(followers, 5)
        mid.kill()  # SIGKILL: the edge relay loses its upstream, its subscribers stay
        await mid.process.wait()
        port = int(mid.url.rsplit(":", 1)[1])
        tree[0] = await _mid(children, publisher, tmp_path, port)
        with SqliteLog(tmp_path / "publisher" / "log.db") as stored:
            bounds = stored.bounds("agents", followers[0].updates[0].epoch)
        assert bounds is not None
        target = bounds[1] + 3  # seqs logged while the mid relay was away, and after
        await eventually(
            lambda: [f.updates[-1].seq for f in followers],
            lambda seqs: min(seqs) >= target,
            timeout=300,
            every=0.5,
            what=f"every follower past seq {target}",
        )
        for follower in followers:
            await follower.stop()
    # The seqs the edge relay lacked came by curiosity, through the restarted mid relay.
    counters = await asyncio.to_thread(scrape, tree[0].url)
    asked = counters["fanout_relay_below_curiosity_passed_total"]
    assert asked + counters["fanout_relay_below_curiosity_answered_total"] >= 1
    with SqliteLog(tmp_path / "publisher" / "log.db") as stored:
        for follower, box in zip(followers, BOXES, strict=True):
            assert follower.view.gaps == 0 and follower.view.resyncs == 0
            report = audit(
                follower.updates, box, key="id", index=("x", "y"), log=stored, dataset="agents"
            )
            assert report.clean, report.problems


EDGES = 4  # edge relays under one mid relay, their every-mode subscribers missing the same seqs
GAP = 6  # seqs logged at least while the mid relay is away


def _logged(tmp_path: Path, epoch: int) -> int:
    """The last seq of ``agents`` the publisher logged in ``epoch`` (-1: none)."""
    with SqliteLog(tmp_path / "publisher" / "log.db") as stored:
        bounds = stored.bounds("agents", epoch)
    return -1 if bounds is None else bounds[1]


async def test_a_mid_relay_restarted_under_many_edges_asks_upstream_once_per_gap(
    children: Children, publisher: Child, tmp_path: Path
) -> None:
    port = free_port()
    mid = await _mid(children, publisher, tmp_path, port, name="merging")
    edges = []
    for number in range(EDGES):
        args = ["--upstream", mid.url, "--port", "0", "--name", f"edge-{number}"]
        log = tmp_path / f"relay-edge-{number}.log"
        edges.append(await children.start("relay", [*args, "--log-level", "info"], log))
    try:
        async with contextlib.AsyncExitStack() as stack:
            sides = [await stack.enter_async_context(connect(edge.url)) for edge in edges]
            followers = [Recorder(await side.subscribe(BOXES[0], mode="every")) for side in sides]
            await until(followers, 5)
            mid.kill()  # every edge loses the same seqs while it is away
            await mid.process.wait()
            lowest = min(f.updates[-1].seq for f in followers)
            epoch = followers[0].updates[0].epoch
            await eventually(  # a gap of several seqs: asked once, not once an edge
                lambda: _logged(tmp_path, epoch),
                lambda last: last >= lowest + GAP,
                timeout=120,
                every=0.2,
                what=f"seq {lowest + GAP} logged",
            )
            lasts = [f.updates[-1].seq for f in followers]  # each edge's gap begins after it
            mid = await _mid(children, publisher, tmp_path, port, name="merging")
            first = _logged(tmp_path, epoch)  # the restarted mid relay serves from about here
            target = first + 3
            await eventually(
                lambda: [f.updates[-1].seq for f in followers],
                lambda seqs: min(seqs) >= target,
                timeout=300,
                every=0.5,
                what=f"every follower past seq {target}",
            )
            counters = await asyncio.to_thread(scrape, mid.url)
            below = [await asyncio.to_thread(scrape, edge.url) for edge in edges]
            for follower in followers:
                await follower.stop()
                assert follower.view.gaps == 0 and follower.view.resyncs == 0
    finally:
        for child in [*edges, mid]:
            await child.stop()
    # Every edge asked for the seqs it lacked; upstream was asked each of them once at most: no
    # more seqs than the union of the edges' asks. Each edge's gap runs from its last seq before
    # the kill to its first from the restarted mid relay (later on a loaded machine, and not the
    # same for every edge), so the union is at most the widest ask widened by how far apart the
    # gaps begin. Without merging, upstream is asked the sum of the edges' asks.
    curiosity = {name: value for name, value in counters.items() if "curiosity" in name}
    asked = curiosity["fanout_relay_below_curiosity_asked_total"]
    upstream = curiosity["fanout_relay_below_curiosity_passed_seqs_total"]
    edge_seqs = [samples["fanout_relay_curiosity_asked_seqs_total"] for samples in below]
    assert asked >= EDGES, curiosity
    assert min(edge_seqs) > 0, edge_seqs
    widest = max(edge_seqs) + (max(lasts) - lowest) + 2
    assert 0 < upstream <= widest, (curiosity, edge_seqs, lasts)
    assert upstream < sum(edge_seqs), (curiosity, edge_seqs)
