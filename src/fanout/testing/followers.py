"""``every``-mode subscribers that fault tests follow across connections, and their audit.

A :class:`Follower` holds one box view of the ``agents`` dataset, keeps every update it got over
every connection (resuming where the last one stopped), and :func:`check` replays them against
the publisher's log (``testing.audit``): nothing lost, duplicated or reordered.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from websockets.exceptions import ConnectionClosed

from fanout.background import Background
from fanout.client import LiveView, SubscriptionError, Update, connect
from fanout.publisher.log import SqliteLog
from fanout.testing.audit import audit
from fanout.views import Box


class Follower:
    """One ``every`` subscriber: every update it received, across its connections."""

    def __init__(self, box: Box) -> None:
        self.box = box
        self.view: LiveView | None = None
        self.updates: list[Update] = []
        self.failures: list[SubscriptionError] = []
        self._stack: contextlib.AsyncExitStack | None = None
        self._arrived = asyncio.Event()

    async def attach(self, url: str) -> None:
        """Connect to a relay and subscribe, resuming where the last connection stopped."""
        await self.detach()
        self._stack = contextlib.AsyncExitStack()
        # Left in reverse: the connection closes first, which ends the drain the group waits for.
        drains = await self._stack.enter_async_context(Background())
        subscriber = await self._stack.enter_async_context(connect(url))
        self.view = await subscriber.subscribe(self.box, mode="every", resume=self.view)
        drains.start(self._drain(self.view))

    async def _drain(self, view: LiveView) -> None:
        try:
            async for update in view:
                self.updates.append(update)
                self._arrived.set()
        except SubscriptionError as exc:
            self.failures.append(exc)  # the connection went away: the test reconnects

    async def detach(self) -> None:
        """Drop the connection (what a crash of the subscriber's side looks like)."""
        if self._stack is not None:
            with contextlib.suppress(ConnectionClosed, OSError):  # the relay may be dead
                async with asyncio.timeout(10):
                    await self._stack.aclose()  # and the drain ended with the connection
            self._stack = None

    async def received(self, more: int, timeout: float = 120.0) -> None:
        """Wait until ``more`` updates beyond those already received have arrived."""
        target = len(self.updates) + more
        async with asyncio.timeout(timeout):
            while len(self.updates) < target:
                self._arrived.clear()
                await self._arrived.wait()

    async def reached(self, seq: int, timeout: float = 180.0) -> None:
        """Wait until the update of ``seq`` has arrived."""
        async with asyncio.timeout(timeout):
            while not self.updates or self.updates[-1].seq < seq:
                self._arrived.clear()
                await self._arrived.wait()


def logged(log: Path, follower: Follower) -> int:
    """The last seq in the publisher's log ``log`` of the stream ``follower`` follows."""
    with SqliteLog(log) as stored:
        bounds = stored.bounds("agents", follower.updates[0].epoch)
    assert bounds is not None
    return bounds[1]


def check(follower: Follower, log: Path, resyncs: int = 0) -> int:
    """Replay ``follower``'s updates against the publisher's log; returns how many seqs.

    Raises:
        AssertionError: a gap, a resync not expected, or what the audit found.
    """
    view = follower.view
    assert view is not None
    assert view.gaps == 0
    assert view.resyncs == resyncs
    with SqliteLog(log) as stored:
        report = audit(
            follower.updates, follower.box, key="id", index=("x", "y"), log=stored, dataset="agents"
        )
    assert report.clean, report.problems
    assert report.restarts == resyncs
    assert report.held == set(view.rows)
    return report.delivered
