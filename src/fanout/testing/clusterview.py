"""Relays sharing a map of responsibility, seen from outside (docs/cluster.md): what the tests
and benchmarks of many relays ask of the processes they run.

- :func:`metric`, :func:`members_seen`, :func:`no_assignments`, :func:`primitives_by_relay` read
  ``GET /metrics``; :func:`where` says which relay serves a view now; :func:`assignments` reads
  what splits assigned, from Redis;
- :class:`Follower` is one ``every`` subscriber of one box, kept across its moves and its
  connections; :func:`last_logged` and :func:`audit_followers` read the publisher's log::

      follower = Follower(Box((0, 0), (100, 100)))
      await follower.attach("ws://127.0.0.1:7701")
      await follower.reached(last_logged(log, follower.updates[0].epoch) + 3)
      await follower.detach()
      audit_followers([follower], log, at_least=3)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Sequence
from pathlib import Path

from redis.asyncio.cluster import RedisCluster

from fanout.background import Background
from fanout.client import LiveView, SubscriptionError, Update
from fanout.client.following import ClusterSubscriber, connect_cluster
from fanout.cluster.registry import NAMESPACE
from fanout.cluster.responsibility import Assignment
from fanout.launch import Child
from fanout.metrics import scrape
from fanout.publisher.log import SqliteLog
from fanout.testing.audit import audit
from fanout.testing.wait import eventually
from fanout.views import Box


async def metric(url: str, name: str) -> float:
    """The sample ``name`` of the ``/metrics`` of the relay or publisher at ``url`` (0 if
    absent)."""
    return (await asyncio.to_thread(scrape, url)).get(name, 0.0)


@contextlib.asynccontextmanager
async def started_together(*starting: Awaitable[Child]) -> AsyncIterator[list[Child]]:
    """Processes started at once (``Children.start`` calls), stopped when the block ends;
    if one fails to start, those that did are stopped and its error is raised. A test may
    replace a child in the list with its restarted self: the list's children are stopped."""
    started = await asyncio.gather(*starting, return_exceptions=True)
    children = [child for child in started if isinstance(child, Child)]
    try:
        for failed in started:
            if isinstance(failed, BaseException):
                raise failed
        yield children
    finally:
        for child in children:
            await child.stop()


async def members_seen(relays: Sequence[Child], count: int, timeout: float = 60.0) -> None:
    """Wait until every one of ``relays`` has ``count`` members in its map.

    Raises:
        NotYet: one had not within ``timeout`` seconds.
    """

    def enough(seen: float) -> bool:
        return seen == count

    for child in relays:
        await eventually(
            functools.partial(metric, child.url, "fanout_relay_registry_members"),
            enough,
            timeout=timeout,
            every=0.2,
            what=f"{count} members in {child.url}'s map",
        )


async def no_assignments(relays: Sequence[Child], timeout: float = 60.0) -> None:
    """Wait until every one of ``relays`` has read a map with no part assigned (after a merge,
    a relay that has not read it yet still sends new subscribers to the relay merging).

    Raises:
        NotYet: one had not within ``timeout`` seconds.
    """

    def none(assigned: float) -> bool:
        return assigned == 0

    for child in relays:
        await eventually(
            functools.partial(metric, child.url, "fanout_relay_registry_assigned"),
            none,
            timeout=timeout,
            every=0.2,
            what=f"no assignment in {child.url}'s map",
        )


async def primitives_by_relay(publisher: Child) -> dict[str, float]:
    """The primitives the publisher holds for each relay, by the relay's name."""
    samples = await asyncio.to_thread(scrape, publisher.url)
    held: dict[str, float] = {}
    for name, value in samples.items():
        if name.startswith("fanout_publisher_relay_primitives{"):
            relay = name.split('name="', 1)[1].split('"', 1)[0]
            held[relay] = held.get(relay, 0.0) + value
    return held


async def assignments(redis: RedisCluster) -> dict[str, Assignment]:
    """The parts splits assigned in the map kept in ``redis`` (a client of its Redis Cluster,
    ``fanout.cluster.registry.connect``), as stored now: part -> assignee, giver and handover. Read
    straight from Redis, so a test sees an assignment the moment the giver wrote it.

    Raises:
        RedisError: Redis could not be reached.
    """
    held = await redis.hgetall(f"{{{NAMESPACE}}}:assigned")
    out: dict[str, Assignment] = {}
    for part, value in held.items():
        out[_text(part)] = Assignment.parse(_text(value))
    return out


def _text(item: bytes | str) -> str:
    return item.decode() if isinstance(item, bytes) else item


def where(cluster: ClusterSubscriber, view: LiveView) -> str:
    """The URL of the relay serving ``view`` of ``cluster`` now ("moving" while it moves)."""
    try:
        return cluster.relay_of(view)
    except KeyError:
        return "moving"


class Follower:
    """One ``every`` subscriber of one box of ``agents``, across its connections (resumed with
    its view) and its moves.

    Attributes:
        box: its view.
        view: the view now (the same object across moves; a new one after ``attach``).
        relay: the URL of the relay it was placed at by the last ``attach``.
        updates: every update received, in order, across connections.
        failures: how its views ended when they ended with an error (a relay died).
    """

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
        """Enter the cluster at ``entry`` and subscribe, resuming where the last view stopped.

        Raises:
            SubscriptionError, OSError: the relays refused it or could not be reached.
        """
        await self.detach()
        self._stack = contextlib.AsyncExitStack()
        draining = await self._stack.enter_async_context(Background())
        # Left in reverse by ``detach``: the connections close (their errors ignored: the view
        # and its updates stay), then the drain has 30 s to take what they left and end.
        self._stack.push_async_callback(self._drained, 30)
        self._stack.enter_context(contextlib.suppress(OSError, SubscriptionError))
        cluster: ClusterSubscriber = await self._stack.enter_async_context(connect_cluster(entry))
        self.cluster = cluster
        self.view = await cluster.subscribe(self.box, mode="every", resume=self.view)
        self.relay = cluster.relay_of(self.view)
        self._task = draining.start(self._drain(self.view))

    async def _drain(self, view: LiveView) -> None:
        try:
            async for update in view:
                self.updates.append(update)
        except SubscriptionError as exc:
            self.failures.append(exc)  # its relay died: the test resumes it elsewhere

    async def _drained(self, timeout: float) -> None:
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self._task, timeout)

    def ended(self) -> bool:
        """Whether its view ended (with an error, or closed) since the last ``attach``."""
        return self._task is not None and self._task.done()

    def serving(self) -> str:
        """The URL of the relay serving the view now ("moving" while it moves)."""
        assert self.cluster is not None and self.view is not None, "not attached"
        return where(self.cluster, self.view)

    async def detach(self) -> None:
        """Close its connections; its updates and view stay (to resume, or to audit)."""
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.aclose()
            self._task = None

    async def reached(self, seq: int, timeout: float = 180.0) -> None:
        """Wait until it has received an update of ``seq`` or later.

        Raises:
            NotYet: it had not within ``timeout`` seconds.
        """
        await eventually(
            lambda: self.updates[-1].seq if self.updates else -1,
            lambda last: last >= seq,
            timeout=timeout,
            every=0.2,
            what=f"{self.box} past seq {seq}",
        )


def last_logged(log: Path, epoch: int, dataset: str = "agents") -> int:
    """The last seq of ``dataset``'s ``epoch`` in the publisher's log at ``log`` (its
    ``log.db``).

    Raises:
        AssertionError: the log holds nothing of that epoch.
    """
    with SqliteLog(log) as stored:
        bounds = stored.bounds(dataset, epoch)
    assert bounds is not None, f"nothing of {dataset} epoch {epoch} in {log}"
    return bounds[1]


def audit_followers(
    followers: Sequence[Follower], log: Path, at_least: int, dataset: str = "agents"
) -> None:
    """Every follower's updates against the publisher's log at ``log``: nothing lost,
    duplicated or reordered across its moves and connections, no gap its view saw, and at least
    ``at_least`` updates each.

    Raises:
        AssertionError: one of them broke the promise (the audit's first problems said).
    """
    with SqliteLog(log) as stored:
        for follower in followers:
            assert follower.view is not None and follower.view.gaps == 0, follower.box
            report = audit(
                follower.updates,
                follower.box,
                key="id",
                index=("x", "y"),
                log=stored,
                dataset=dataset,
            )
            found = (report.lost, report.duplicated, report.reordered)
            assert found == (0, 0, 0), (follower.box, found, report.problems)
            assert report.clean, (follower.box, report.problems)
            assert report.delivered >= at_least, (follower.box, report.delivered)
