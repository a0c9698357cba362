"""Relay tiers with real processes on loopback (issue 27, deliverable 1): a Spark publisher, a
flat relay on it, and a tree publisher -> mid relay -> edge relay (``fanout relay --upstream``).

Subscribers of the edge relay get the same rows at the same ticks as subscribers of the flat
relay (mode ``latest``: compared at every tick both received), and ``every`` subscribers of the
edge relay get every seq exactly once, in order, each update exactly what that seq's logged
change makes of the view (``fanout.testing.audit`` against the publisher's log), and the same
updates as ``every`` subscribers of the flat relay.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from fanout.client import LiveView, Update, connect
from fanout.launch import Child, start
from fanout.metrics import scrape
from fanout.publisher.log import SqliteLog
from fanout.testing.audit import audit
from fanout.testing.ports import free_port
from fanout.testing.wait import eventually
from fanout.views import Box

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

BOXES = [Box((100, 100), (300, 300)), Box((250, 250), (450, 450)), Box((600, 0), (800, 250))]


async def _mid(publisher: Child, tmp_path: Path, port: int) -> Child:
    args = ["--publisher", publisher.url, "--port", str(port), "--name", "mid", "--serve-relays"]
    return await start("relay", [*args, "--log-level", "info"], tmp_path / "relay-mid.log")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tree(publisher: Child, tmp_path: Path) -> AsyncIterator[list[Child]]:
    """[a mid relay on the publisher, an edge relay on the mid relay]; the last test replaces
    the mid relay with its restarted self (on the same port)."""
    children = [await _mid(publisher, tmp_path, free_port())]
    try:
        args = ["--upstream", children[0].url, "--port", "0", "--name", "edge"]
        edge = await start("relay", [*args, "--log-level", "info"], tmp_path / "relay-edge.log")
        children.append(edge)
        yield children
    finally:
        for child in reversed(children):
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
    async with connect(relay.url) as flat_side, connect(edge.url) as edge_side:
        flat = [Recorder(await flat_side.subscribe(box, rate=100)) for box in BOXES]
        tiered = [Recorder(await edge_side.subscribe(box, rate=100)) for box in BOXES]
        await until(flat + tiered, 15)
        for recorder in flat + tiered:
            await recorder.stop()
    for a, b in zip(flat, tiered, strict=True):
        at_flat, at_edge = states(a.updates), states(b.updates)
        common = sorted(set(at_flat) & set(at_edge))
        assert len(common) >= 10, (sorted(at_flat)[-5:], sorted(at_edge)[-5:])
        for tick in common:
            assert at_edge[tick] == at_flat[tick], f"tick {tick} differs in {a.view}"
        assert any(at_flat[tick] for tick in common)  # the boxes hold agents


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
    return sorted(zip(*(columns[n].tolist() for n in names), strict=True))


async def test_a_restarted_mid_relay_costs_every_mode_subscribers_of_the_edge_nothing(
    publisher: Child, tree: list[Child], tmp_path: Path
) -> None:
    mid, edge = tree
    async with connect(edge.url) as side:
        followers = [Recorder(await side.subscribe(box, mode="every")) for box in BOXES]
        await until(followers, 5)
        mid.kill()  # SIGKILL: the edge relay loses its upstream, its subscribers stay
        await mid.process.wait()
        port = int(mid.url.rsplit(":", 1)[1])
        tree[0] = await _mid(publisher, tmp_path, port)
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
