"""A worker's copy of its leader's map of responsibility (``fanout relay --workers N
--registry``). The leader holds the registry (the lease, its beats, what it warms) and tells
each worker the map and whether the lease holds (``Responsibility``); the worker decides of
its own subscriptions what a relay of one process decides of its own. Rules:

1. **The leader's map, as told**: new subscriptions are redirected by it (``redirects``), held
   ones end as their parts move (``moving``), and all of them when the lease lapses.
2. **Told before the catalog**: the subscriptions a worker held until its catalog are admitted
   by the map, never served for want of one.
3. **Read afresh before an HTTP stream is redirected** (``Registry.confirm``): the worker asks
   its leader (``MapWanted``) and waits for the map, at most ``REDIS_TIMEOUT`` s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from fanout.cluster import redirects
from fanout.cluster.membership import LOOK
from fanout.cluster.moving import HeldMoves
from fanout.cluster.registry import REDIS_TIMEOUT, redirected
from fanout.cluster.responsibility import Assignment, ResponsibilityMap
from fanout.metrics import Sample
from fanout.relay.core.relaycore import RelayCore, Send
from fanout.views import View
from fanout.wire.messages import Error, Responsibility, Subscribe

log = logging.getLogger(__name__)


def told(frame: Responsibility) -> ResponsibilityMap:
    """The map ``frame`` tells."""
    assigned = {part: Assignment.parse(text) for part, text in frame.assigned.items()}
    return ResponsibilityMap(frame.members, frame.side, frozenset(frame.standby), assigned)


def telling(me: str, table: ResponsibilityMap, serving: bool) -> Responsibility:
    """The frame telling a worker of relay ``me`` the map ``table`` and ``serving``."""
    assigned = {part: held.stored() for part, held in table.assigned.items()}
    members, standby = dict(table.members), sorted(table.standby)
    return Responsibility(me, table.side, members, standby, assigned, serving)


class MapCopy:
    """A worker's map as its leader last told it: what its relay asks a registry."""

    def __init__(
        self,
        core: RelayCore,
        *,
        dispatch: Callable[[Iterable[Send]], None],
        wake: Callable[[], None],
        ask: Callable[[], bool],
    ) -> None:
        """Args:
        core: the worker's core (its subscriptions).
        dispatch: sends what ends a subscription.
        wake: wakes the worker's pump.
        ask: sends its leader ``MapWanted``; False: not connected to it.
        """
        self.name, self.map, self.serving = "", ResponsibilityMap(), True
        #: New subscriptions redirected; redirects of HTTP streams whose map the leader read
        #: afresh first, and those it did not answer in time (rule 3).
        self.redirected = self.confirmed = self.unconfirmed = 0
        self.moves = HeldMoves(core, "", dispatch=dispatch, wake=wake, elsewhere=self.elsewhere)
        self._ask = ask
        self._waiting: list[asyncio.Future[None]] = []

    def tell(self, frame: Responsibility) -> None:
        """The leader's map and lease now (rule 1)."""
        lapsed = self.serving and not frame.serving
        self.name = self.moves.name = frame.me
        self.map, self.serving = told(frame), frame.serving
        if lapsed:
            log.warning("relay worker: the relay's lease lapsed: it serves no subscription")
            self.moves.lapsed()
        else:
            self.moves.settle(self.map, asyncio.get_running_loop().time())
        for waiting in self._waiting:
            if not waiting.done():
                waiting.set_result(None)
        self._waiting.clear()

    def redirect(self, request: Subscribe, held: bool) -> Error | None:
        """The redirect answering ``request`` here, or None to serve it (``redirects``)."""
        answer = redirects.answer(self.map, self.name, self.serving, request, held)
        if answer is not None:
            self.redirected += 1
        return answer

    def elsewhere(self, dataset: str, view: View, sub: int) -> Error:
        """What ends subscription ``sub`` while the lease is lapsed (``redirects``)."""
        return redirects.elsewhere(self.map, self.name, dataset, view, sub)

    async def confirm(self, request: Subscribe) -> None:
        """If the map as told would redirect ``request``, have it read afresh (rule 3)."""
        if redirects.redirect(self.map, self.name, request, False) is None:
            return
        if not self._ask():
            return  # not connected to the leader: the map as told stands
        answered = asyncio.get_running_loop().create_future()
        self._waiting.append(answered)
        try:
            async with asyncio.timeout(REDIS_TIMEOUT):
                await answered
            self.confirmed += 1
        except TimeoutError:
            self.unconfirmed += 1
            log.warning("relay worker: the leader sent no map within %g s", REDIS_TIMEOUT)
        finally:
            if answered in self._waiting:
                self._waiting.remove(answered)

    async def run(self) -> None:
        """Every ``LOOK`` s, end the moving subscriptions due (``moving`` rule 2)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(LOOK)
            self.moves.look(self.map, loop.time())

    def samples(self) -> list[Sample]:
        """The worker's redirects (the leader reports the registry's other figures)."""
        return [
            redirected(self.redirected),
            Sample(
                "relay_map_confirmed",
                "counter",
                "HTTP streams about to be redirected whose map a worker had its leader read.",
                self.confirmed,
            ),
            Sample(
                "relay_map_unconfirmed",
                "counter",
                "HTTP streams redirected by the map as told: the leader sent none in time.",
                self.unconfirmed,
            ),
        ]
