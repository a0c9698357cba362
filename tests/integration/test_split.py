"""Split and merge on load with real processes (issue 27, deliverables 3 and 5): a real Spark
publisher, real Redis Clusters, relays started as a user would (``fanout relay --registry ...
--split-above ... --standby``), subscribers through ``fanout.client``.

Redirect policy (``g0`` and its standby ``g1``): past its threshold of subscriptions the giver
hands about half its cells to the standby, whose subscribers move there (``every`` views
resumed, audited against the publisher's log: nothing lost, duplicated or reordered;
``latest`` views equal to a flat relay's at every tick), and the standby hands them back when it
falls below its merge threshold. The giver killed (SIGKILL) right after it wrote its
assignments, and the standby killed in the middle of a split, leave every subscriber served once
it has re-entered.

Forward policy (``h0`` and its standby ``h1``): the subscribers' connections stay at the giver;
what moves is the upstream work of the cells handed over (the publisher's primitives leave the
giver and come to the standby, which serves them to the giver), and back at the merge; the same
audits across both.

HTTP streams moving in a split (``split_http.py``) run here too, on this module's publisher.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from tests.integration.split_http import (  # noqa: F401 (collected here, on this module's publisher)
    http_movers,
    test_http_streams_move_with_their_part_in_a_split_and_lose_nothing,
)
from tests.integration.test_tiers import Recorder, states, until

from fanout.client import LiveView, connect
from fanout.client.following import connect_cluster
from fanout.cluster.registry import connect as registry_client
from fanout.cluster.responsibility import part_of
from fanout.launch import Child, Children
from fanout.testing.clusterview import (
    Follower,
    assignments,
    audit_followers,
    last_logged,
    members_seen,
    metric,
    no_assignments,
    primitives_by_relay,
    started_together,
    where,
)
from fanout.testing.redis import throwaway_redis_cluster
from fanout.testing.wait import eventually
from fanout.views import Box

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

LEASE = 2.0
SPLITTERS = ("g0", "g1")
FORWARDERS = ("h0", "h1")
SPLIT_DWELL = 4.0
#: Ten views in ten cells of the 256-unit grid over the 1,000-unit world: the giver splits past
#: 7 subscriptions (five cells go), the standby hands its cells back below 3.
SPLIT_BOXES = [
    Box((x + 60, y + 60), (x + 190, y + 190)) for x in (0, 256, 512, 768) for y in (0, 256, 512)
][:10]
#: The balancer's subscribers figure, as a relay counts it.
LOAD = "fanout_relay_load_subscribers"
#: The publisher's log, under the module's directory (conftest's ``publisher``).
LOG = Path("publisher") / "log.db"


def last_seq(tmp_path: Path, epoch: int) -> int:
    """The last seq of ``agents`` the module's publisher logged in ``epoch``."""
    return last_logged(tmp_path / LOG, epoch)


@pytest.fixture(scope="module")
def split_registry() -> Iterator[str]:
    """A map of its own for the relays that split and merge."""
    with throwaway_redis_cluster() as nodes:
        host, port = nodes[0]
        yield f"redis://{host}:{port}"


async def _splitter(
    children: Children, publisher: Child, registry: str, name: str, tmp_path: Path, *extra: str
) -> Child:
    args = ["--publisher", publisher.url, "--port", "0", "--name", name, "--grace", "1"]
    args += ["--registry", registry, "--registry-lease", str(LEASE), "--log-level", "info"]
    args += ["--split-above", "subscribers=7", "--merge-below", "subscribers=3"]
    args += ["--split-dwell", str(SPLIT_DWELL), *extra]
    return await children.start("relay", args, tmp_path / f"relay-{name}.log")


@contextlib.asynccontextmanager
async def pair(
    children: Children,
    publisher: Child,
    registry: str,
    names: tuple[str, str],
    tmp_path: Path,
    *extra: str,
) -> AsyncIterator[list[Child]]:
    """A giver and a standby (``--standby``: it owns nothing until a split), stopped after;
    a test may replace one with its restarted self in the list."""
    async with started_together(
        _splitter(children, publisher, registry, names[0], tmp_path, *extra),
        _splitter(children, publisher, registry, names[1], tmp_path, "--standby", *extra),
    ) as started:
        yield started


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def splitters(
    children: Children, publisher: Child, split_registry: str, tmp_path: Path
) -> AsyncIterator[list[Child]]:
    """The giver ``g0`` and the standby ``g1``, redirect policy."""
    async with pair(children, publisher, split_registry, SPLITTERS, tmp_path) as started:
        yield started


@pytest.fixture(scope="module")
def forward_registry() -> Iterator[str]:
    """A map of its own for the forwarding relays that split and merge."""
    with throwaway_redis_cluster() as nodes:
        host, port = nodes[0]
        yield f"redis://{host}:{port}"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def forward_splitters(
    children: Children, publisher: Child, forward_registry: str, tmp_path: Path
) -> AsyncIterator[list[Child]]:
    """The giver ``h0`` and the standby ``h1``, forward policy: the standby's name sorts
    after the giver's, so the giver forwards the cells it hands over from it."""
    async with pair(
        children,
        publisher,
        forward_registry,
        FORWARDERS,
        tmp_path,
        "--registry-policy",
        "forward",
    ) as started:
        yield started


def audited(followers: list[Follower], tmp_path: Path, at_least: int) -> None:
    """Every follower's updates against the module's publisher's log: nothing lost, duplicated
    or reordered, across its moves."""
    audit_followers(followers, tmp_path / LOG, at_least)


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
        target = last_seq(tmp_path, followers[0].updates[0].epoch) + 3
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
        target = last_seq(tmp_path, followers[0].updates[0].epoch) + 3
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


async def test_the_giver_killed_during_a_split_leaves_every_subscriber_served(
    children: Children,
    publisher: Child,
    relay: Child,
    *,
    split_registry: str,
    splitters: list[Child],
    tmp_path: Path,
) -> None:
    """SIGKILL of the giver as soon as its assignments are in Redis (before or while its
    subscribers of the cells handed over are redirected): the assignee keeps those cells (its
    lease is alive), the giver's other cells fall to the relays left once its lease ran out
    (here the standby alone), every view is served again where the map says, and the giver
    restarted under its name gets back its cells but not those it handed over."""
    await members_seen(splitters, len(SPLITTERS))
    giver, standby = splitters
    await no_assignments(splitters)  # the last test's merge read by both
    followers = [Follower(box) for box in SPLIT_BOXES[:8]]
    for follower in followers:
        await follower.attach(standby.url)
        assert follower.relay == giver.url
    redis = registry_client(split_registry)
    async with connect_cluster(standby.url) as latest_side:
        latest: list[LiveView] = [await latest_side.subscribe(b, rate=20) for b in SPLIT_BOXES[8:]]
        assert {latest_side.relay_of(view) for view in latest} == {giver.url}
        try:
            # The hook: the assignments the split wrote, polled back to back, then SIGKILL
            # at once: the giver is then reading the map back or redirecting its subscribers.
            handed = await eventually(
                lambda: assignments(redis), timeout=90, every=0.005, what="a split's assignments"
            )
            os.kill(giver.pid, signal.SIGKILL)
            await giver.process.wait()
        finally:
            await redis.aclose()
        assert {a.member for a in handed.values()} == {SPLITTERS[1]}
        assert {a.giver for a in handed.values()} == {SPLITTERS[0]}
        # half of the giver's cells: 5 of its 10 (4 if the split came before the last view)
        assert 4 <= len(handed) <= 5, handed
        # The giver's lease runs out: the standby is the only relay of the map.
        await members_seen([standby], 1)
        # Views at the giver ended with its connection; the moved ones stay at the standby.
        await eventually(
            lambda: [f.ended() or f.serving() == standby.url for f in followers],
            all,
            timeout=60,
            every=0.2,
            what="every view ended or at the standby",
        )
        await eventually(
            lambda: [v._closed or where(latest_side, v) == standby.url for v in latest],
            all,
            timeout=60,
            every=0.2,
            what="every latest view ended or at the standby",
        )
        ended = [f for f in followers if f.ended()]
        for follower in ended:  # re-entering anywhere: served where the map says now
            await follower.attach(standby.url)
            assert follower.relay == standby.url
        for i, view in enumerate(latest):
            if view._closed:
                latest[i] = await latest_side.subscribe(view.view, rate=20)
        assert {latest_side.relay_of(view) for view in latest} == {standby.url}
        target = last_seq(tmp_path, followers[0].updates[0].epoch) + 3
        await asyncio.gather(*(f.reached(target) for f in followers))
        # latest views consistent after it: equal to a flat relay's at common ticks
        async with connect(relay.url) as flat_side:
            now = [Recorder(view) for view in latest]
            flat = [Recorder(await flat_side.subscribe(view.view, rate=20)) for view in latest]
            await until(now + flat, 4)
            for recorder in now + flat:
                await recorder.stop()
        for here_side, there_side in zip(now, flat, strict=True):
            here, there = states(here_side.updates), states(there_side.updates)
            common = sorted(set(here) & set(there))
            assert common, (sorted(here), sorted(there))
            for tick in common:
                assert here[tick] == there[tick], f"tick {tick} differs"
    audited(followers, tmp_path, at_least=3)
    # Restarted under its name, the giver is back in the map; the assignments its split wrote
    # outlived it (the assignee is live): those cells stay at the standby until it merges.
    splitters[0] = giver = await _splitter(
        children, publisher, split_registry, SPLITTERS[0], tmp_path
    )
    await members_seen(splitters, len(SPLITTERS))
    redis = registry_client(split_registry)
    try:
        still = await assignments(redis)
    finally:
        await redis.aclose()
    for follower in followers:
        part = part_of("agents", follower.box)
        assert (part in still) == (part in handed)
    for follower in followers:
        await follower.detach()
    # The standby, below 3 once they are gone, hands the cells back to their owner by
    # rendezvous: the giver.
    await no_assignments(splitters)
    assert await metric(standby.url, "fanout_relay_merges_total") == 2


async def test_the_standby_killed_during_a_split_leaves_every_subscriber_served(
    splitters: list[Child], tmp_path: Path
) -> None:
    await members_seen(splitters, len(SPLITTERS))
    giver, standby = splitters
    await no_assignments(splitters)  # the last test's merge read by both
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
    # The giver redirects once the standby holds the cells warm: the first view there.
    await eventually(
        lambda: any(f.view is not None and f.view.moves for f in followers),
        timeout=60,
        every=0.005,
        what="a view at the standby",
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
    target = last_seq(tmp_path, followers[0].updates[0].epoch) + 3
    await asyncio.gather(*(f.reached(target) for f in followers))
    for follower in followers:
        await follower.detach()
    audited(followers, tmp_path, at_least=3)


async def test_a_split_and_a_merge_under_the_forward_policy_move_the_upstream_work(
    publisher: Child,
    relay: Child,
    forward_registry: str,
    forward_splitters: list[Child],
    tmp_path: Path,
) -> None:
    """Forwarding relays split on ``subscribers``, which under the forward policy counts the
    subscriptions of the cells a relay is responsible for: the giver keeps serving all its
    subscribers after the split, so the subscriptions it holds would keep it past its
    threshold (and the standby, holding none, below its own) for ever."""
    await members_seen(forward_splitters, len(FORWARDERS))
    giver, standby = forward_splitters
    followers = [Follower(box) for box in SPLIT_BOXES[:6]]
    for follower in followers:
        await follower.attach(giver.url)  # no redirect under forward: served where it entered
        assert follower.relay == giver.url
    async with connect(giver.url) as latest_side, connect(relay.url) as flat_side:
        latest = [Recorder(await latest_side.subscribe(box, rate=20)) for box in SPLIT_BOXES[6:]]
        flat = [Recorder(await flat_side.subscribe(box, rate=20)) for box in SPLIT_BOXES[6:]]
        # Ten subscriptions of ten cells, past 7 for a dwell: five of the cells go.
        await eventually(
            lambda: metric(giver.url, "fanout_relay_splits_total"),
            lambda splits: splits == 1,
            timeout=90,
            every=0.2,
            what="a split",
        )
        redis = registry_client(forward_registry)
        try:
            handed = await assignments(redis)
        finally:
            await redis.aclose()
        moved = [i for i, box in enumerate(SPLIT_BOXES) if part_of("agents", box) in handed]
        # half of the giver's cells: 5 of its 10 (4 if the split came before the last view)
        assert 4 <= len(moved) <= 5 and {a.member for a in handed.values()} == {FORWARDERS[1]}

        async def upstream_work() -> tuple[float, float, float, dict[str, float]]:
            return (
                await metric(giver.url, "fanout_relay_primitives"),
                await metric(giver.url, "fanout_relay_forwarded_primitives"),
                await metric(standby.url, "fanout_relay_below_primitives"),
                await primitives_by_relay(publisher),
            )

        # The upstream work of the five cells moved: the giver takes them from the standby,
        # which alone acquires them from the publisher; the giver acquires only the rest.
        await eventually(
            upstream_work,
            lambda w: (
                w[1] == len(moved)
                and w[2] == len(moved)
                and w[3].get(FORWARDERS[1], 0)
                and w[3].get(FORWARDERS[0], 0) == w[0] - w[1]
            ),
            timeout=60,
            every=0.2,
            what="the moved cells forwarded from the standby",
        )
        if await metric(giver.url, "fanout_relay_workers") > 1:
            # The giver's leader acquired the cells anew: its workers were told which of their
            # primitives wait for snapshots (``Resync``), their ``every`` views audited below.
            assert await metric(giver.url, "fanout_relay_resyncs_taken_total") > 0
        # What the balancers count now: the giver the subscriptions of the cells it kept, the
        # standby the primitives the giver forwards from it (neither splits nor merges).
        await eventually(
            lambda: asyncio.gather(*(metric(c.url, LOAD) for c in forward_splitters)),
            lambda loads: list(loads) == [len(SPLIT_BOXES) - len(moved), len(moved)],
            timeout=30,
            every=0.2,
            what="the giver's and the standby's subscribers figures",
        )
        await asyncio.gather(*(f.reached(0) for f in followers))
        target = last_seq(tmp_path, followers[0].updates[0].epoch) + 3
        await asyncio.gather(*(f.reached(target) for f in followers))
        await until(latest, max(len(r.updates) for r in latest) + 3)
        assert await metric(giver.url, "fanout_relay_assembled_total") > 0
        # Below 3 at the standby: close three of the moved cells' views at the giver, whose
        # primitives there are released; after a dwell the standby hands its cells back, and
        # the giver, with 7, stays below its own threshold.
        closing = moved[-3:]
        for i in closing:
            if i < len(followers):
                await followers[i].detach()
            else:
                await latest[i - len(followers)].view.close()
        await eventually(
            lambda: metric(standby.url, "fanout_relay_merges_total"),
            lambda merges: merges == 1,
            timeout=90,
            every=0.2,
            what="the standby handing its cells back",
        )
        merged_at = max(r.updates[-1].tick for r in flat)
        # ... and their upstream work with them: the giver acquires everything itself again.
        await eventually(
            upstream_work,
            lambda w: (
                w[1] == 0
                and w[2] == 0
                and not w[3].get(FORWARDERS[1], 0)
                and w[3].get(FORWARDERS[0], 0) == w[0] > 0
            ),
            timeout=60,
            every=0.2,
            what="the cells acquired by the giver again",
        )
        target = last_seq(tmp_path, followers[0].updates[0].epoch) + 3
        open_followers = [f for i, f in enumerate(followers) if i not in closing]
        await asyncio.gather(*(f.reached(target) for f in open_followers))
        await eventually(
            lambda: [r.updates[-1].tick for r in latest if not r.view._closed],
            lambda ticks: all(tick > merged_at + 3 for tick in ticks),
            timeout=120,
            every=0.2,
            what="the latest views' ticks after the merge",
        )
        for recorder in latest + flat:
            await recorder.stop()
        for here_side, still in zip(latest, flat, strict=True):
            assert here_side.view.error is None, "no redirect, no error"
            here, there = states(here_side.updates), states(still.updates)
            common = sorted(set(here) & set(there))
            assert len(common) >= 3
            for tick in common:
                assert here[tick] == there[tick], f"tick {tick} differs in {here_side.view.view}"
            if not here_side.view._closed:  # served across the split and the merge
                assert any(tick > merged_at for tick in common)
    # One split and one merge: the giver, down to the subscriptions of its own cells after
    # the split, did not split again, nor try to.
    assert await metric(giver.url, "fanout_relay_splits_total") == 1
    assert await metric(giver.url, "fanout_relay_split_failures_total") == 0
    # The subscribers' connections stayed: no view ended but those closed, none moved.
    failed = [(i, f.failures) for i, f in enumerate(followers) if f.failures]
    assert all(i in closing for i, _ in failed), failed
    for follower in followers:
        await follower.detach()
    assert all(f.view is not None and f.view.moves == 0 for f in followers)
    audited(followers, tmp_path, at_least=3)
