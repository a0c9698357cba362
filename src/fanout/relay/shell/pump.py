"""The relay's timers: the pump that hands out due pushes, and housekeeping.

The pump asks the core for due pushes whenever something changed, a connection became
writable, or the earliest rate timer fires (CA 3197003 [0138], Fig. 7). A round of pushes runs
for at most ``RelayConfig.planning.pump_budget`` seconds, then yields to the event loop so reads,
writes and batches keep flowing with thousands of subscribers; what was not served stays queued,
aging, for the next round. A batch written meanwhile (``relay.shell.writer``) is swapped in before a
round, and ends a round early: the next one starts from its state.

Housekeeping, twice a second, releases spare primitives (of the relays below too), logs the
relay's counts every ``stats_every`` seconds and closes subscribers that left a push (or, on a
link it paces, a ping behind one: ``relay.core.links``) unread for ``stall_timeout`` seconds,
looking at the connections pushed to or busy, not all of them each time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterable

from fanout import metrics
from fanout.relay.config import RelayConfig
from fanout.relay.core.relaycore import RelayCore, Send
from fanout.relay.shell.clients import Clients
from fanout.relay.shell.writer import RECORDED, Writer
from fanout.tiers.below import Relays

log = logging.getLogger(__name__)

#: Housekeeping passes (two a second) in which every connection is looked at once for a stall,
#: besides those watched (``Pump._close_stalled``).
SWEEP = 10


class Pump:
    """Dispatches due pushes and keeps house, until cancelled.

    Attributes:
        tick_to_push: seconds from a tick (the publisher's clock) to its push being handed to
            the subscriber's connection.
        pushed: the last ``RECORDED`` ticks pushed, by their tick time: when (``time.time``)
            the first and the last round that pushed one of them ended.
    """

    def __init__(
        self,
        config: RelayConfig,
        core: RelayCore,
        relays: Relays,
        *,
        clients: Clients,
        writer: Writer,
        wake: asyncio.Event,
        dispatch: Callable[[Iterable[Send]], None],
    ) -> None:
        """Args:
        config: the relay's configuration.
        core: the relay's core.
        relays: the relays below (``tiers``).
        clients: the relay's connections.
        writer: the upstream's batches being written.
        wake: set whenever the pump should look for due pushes.
        dispatch: sends frames.
        """
        self._config = config
        self._core = core
        self._relays = relays
        self._clients = clients
        self._writer = writer
        self._wake = wake
        #: CPU seconds the event loop's thread spent in rounds of pushes (``relay.shell.admin``).
        self.push_cpu = 0.0
        self._dispatch = dispatch
        #: Connections to look at for a stall: pushed to, or found busy, since last seen idle.
        self._watched: set[int] = set()
        self._sweep: list[int] = []  # the connections this sweep has still to look at
        self.tick_to_push = metrics.Histogram(
            "relay_tick_to_push_seconds",
            "Seconds from a tick (the publisher's clock) to the relay handing its push to the"
            " subscriber's connection.",
        )
        self.pushed: dict[float, tuple[float, float]] = {}

    async def run(self) -> None:
        """Hand out due pushes round after round, until cancelled.

        Its clock is ``time.monotonic``, the loop's own clock (asyncio's ``loop.time()``), read
        when it is needed: uvloop's ``loop.time()`` is libuv's, whole milliseconds read once a
        turn of the loop, with which a push due within the millisecond was never due yet, and the
        pump woke and found nothing to do, turn after turn, until the clock ticked over.
        """
        loop = asyncio.get_running_loop()
        while True:
            now = time.monotonic()
            wakeup = self._core.next_wakeup(now)
            if wakeup is None or wakeup > now:
                await self._until_woken(loop, None if wakeup is None else wakeup - now)
            self._wake.clear()
            self._writer.advance()  # a batch written meanwhile is swapped in first
            self.round(time.monotonic())
            await asyncio.sleep(0)  # let reads, writes and batches in between rounds

    async def _until_woken(self, loop: asyncio.AbstractEventLoop, delay: float | None) -> None:
        """Wait for ``wake``, or ``delay`` seconds if given, rounded up to whole milliseconds
        (uvloop's timers are whole milliseconds: never early, so the push is due when it fires).

        A timer that sets ``wake``, not ``asyncio.wait_for``: that made a task, a timeout and
        their callbacks every round (docs/benchmarks/relay.md, "Where a push's time goes").
        """
        timer = None
        if delay is not None:
            timer = loop.call_later(math.ceil(delay * 1000) / 1000, self._wake.set)
        try:
            await self._wake.wait()
        finally:
            if timer is not None:
                timer.cancel()

    def round(self, now: float) -> None:
        """Dispatch due pushes until there are none, the round's time budget is spent, or a
        batch is written (the next round starts from its state)."""
        started = time.thread_time()  # once a round: the admin's per-subscriber CPU shares
        deadline = time.perf_counter() + self._config.planning.pump_budget
        writer = self._writer
        rounds = self._core.serve(now, self._is_idle, lambda: time.perf_counter() >= deadline)
        with contextlib.closing(rounds) as pushes:
            for send in pushes:
                self._dispatch((send,))
                self._watched.add(send.to)  # looked at for a stall until seen idle
                if time.perf_counter() >= deadline or writer.written():
                    break
        writer.advance()
        self.push_cpu += time.thread_time() - started
        pushed = self._core.take_pushed_ticks()
        if pushed:
            wall, seen = time.time(), self.pushed
            for tick_time in pushed:
                self.tick_to_push.observe(max(0.0, wall - tick_time))
                seen[tick_time] = (seen.get(tick_time, (wall, wall))[0], wall)
            while len(seen) > RECORDED:
                del seen[next(iter(seen))]

    def _is_idle(self, client: int) -> bool:
        outbound = self._clients.open.get(client)
        if outbound is None:
            return False
        if not outbound.idle:
            self._watched.add(client)
            return False
        return True

    async def housekeeping(self) -> None:
        """Release spare primitives, log counts and close stalled subscribers, until
        cancelled."""
        config = self._config
        loop = asyncio.get_running_loop()
        logged = loop.time()
        while True:
            await asyncio.sleep(0.5)
            now = loop.time()
            self._dispatch(self._relays.housekeeping(now))
            self._dispatch(self._core.serving.live.expire(now))  # writes never confirmed
            self._wake.set()  # a prune may have left new state to swap in
            if config.process.stats_every and now - logged >= config.process.stats_every:
                logged = now
                stats = {**self._core.stats(), **self._relays.stats()}
                log.info("relay %s: %s", config.name, stats)
            self._close_stalled(now)

    def _close_stalled(self, now: float) -> None:
        """Close the connections that left a push (or a paced link's ping) unread too long.

        Looked at: those pushed to or found busy since they were last seen idle, those on a
        fitted link (``relay.core.links``), and a ``SWEEP``-th of all (any other frame they
        hold: every connection once in ``SWEEP`` passes), not every connection each pass.
        """
        open_, links = self._clients.open, self._core.serving.links
        if not self._sweep:
            self._sweep = list(open_)
        share = min(len(self._sweep), math.ceil(len(open_) / SWEEP))
        swept = [self._sweep.pop() for _ in range(share)]
        watched = self._watched
        for client in {*watched, *links.fitted, *swept}:
            outbound = open_.get(client)
            if outbound is None:
                watched.discard(client)
                continue
            stalled = max(outbound.stalled_for(now), links.unread_for(client, now))
            if stalled > self._config.limits.stall_timeout:
                outbound.close(f"slow consumer: a push unread for {stalled:.0f} s")
            elif outbound.idle:
                watched.discard(client)
            else:
                watched.add(client)
