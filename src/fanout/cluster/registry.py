"""The members of the map of responsibility, kept in Redis Cluster with leases: the thin shell
around ``cluster.responsibility`` (docs/cluster.md, "Leases", says why of each rule). Rules:

1. **One slot** (hash tag ``{NAMESPACE}``); Lua scripts act atomically.
2. **Leases on Redis's clock** (the node's ``TIME``), so hosts' clocks need not agree.
3. **A beat** every ``lease / 3`` s renews the lease, drops expired members and reads the live
   ones in one round trip (``BEAT``), told to ``on_change(before, after)``.
4. **Leaving.** A relay stopped cleanly removes itself (and its standby entry) at once.
5. **Redis away.** A failed beat is logged and retried; every call times out (``REDIS_TIMEOUT``).
6. **Standbys and assignments** are read with the members; ``ASSIGN`` checks atomically that
   both relays are live, the giver's owners current, no part taken; ``WARMED`` marks one ready.
7. **One beat at a time**: a late reply never puts an older map over a newer one; ``confirm``
   reads afresh before an HTTP stream is redirected.
8. **A lapsed lease serves nothing**: unrenewed by a beat's send + ``lease``, the relay owns no
   part (``lapse_watchers``); back in the map, it serves again a lease later (``back_watchers``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError, ResponseError

from fanout import cancelling
from fanout.cluster import redirects
from fanout.cluster.redirects import elsewhere, redirect
from fanout.cluster.responsibility import DEFAULT_SIDE, Assignment, ResponsibilityMap
from fanout.cluster.scripts import ASSIGN, BEAT, LEAVE, UNASSIGN, WARMED
from fanout.cluster.settings import registry_address
from fanout.errors import FanoutError
from fanout.metrics import Sample
from fanout.views import View
from fanout.wire.messages import Error, Subscribe

log = logging.getLogger(__name__)

#: What a call to the Redis Cluster raises when it fails: redis-py raises
#: ``RedisClusterException``, which is not a ``RedisError``, when no node answers at all.
REDIS_FAILURES = (RedisError, RedisClusterException)

#: Seconds any call to Redis may take (rule 5).
REDIS_TIMEOUT = 5.0
#: The hash tag every key of the map shares (rule 1).
NAMESPACE = "fanout-map"


class HandOverRefused(FanoutError):
    """The registry refused to assign parts (rule 6): the map changed under the giver."""

    code = "unavailable"


def connect(address: str) -> RedisCluster:
    """A client of the Redis Cluster one of whose nodes is ``address``.

    Args:
        address: ``redis://host:port`` or ``host:port``.

    Raises:
        ConfigError: the address is not of that form.
    """
    host, port = registry_address(address)
    return RedisCluster(
        host=host, port=port, socket_timeout=REDIS_TIMEOUT, socket_connect_timeout=REDIS_TIMEOUT
    )


class Registry:
    """This relay's membership of the map, and the map as last read (rules 3-5)."""

    def __init__(
        self,
        redis: RedisCluster,
        name: str,
        url: str = "",
        *,
        lease: float = 3.0,
        side: float = DEFAULT_SIDE,
        on_change: Callable[[ResponsibilityMap, ResponsibilityMap], None] | None = None,
        standby: bool = False,
    ) -> None:
        """A member named ``name``, reached at ``url`` (set it before ``run`` if not known
        yet), holding a lease of ``lease`` seconds; a ``standby`` owns nothing by rendezvous.

        Raises:
            ValueError: ``lease`` is not positive, or ``name`` is empty.
        """
        if not lease > 0:
            raise ValueError(f"the registry's lease must be > 0 seconds, not {lease}")
        if not name:
            raise ValueError("a relay in a registry needs a name")
        self.redis, self.name, self.url, self.lease = redis, name, url, lease
        self.map = ResponsibilityMap({}, side)
        self.on_change = on_change
        #: Also told of every change, after ``on_change`` (the relay's moved subscriptions).
        self.watchers: list[Callable[[ResponsibilityMap, ResponsibilityMap], None]] = []
        self.standby = standby
        self.changes = 0
        self.failed_beats = 0
        self.redirected = 0
        #: Rule 8: told (with the map without this relay) when its lease lapsed.
        self.lapse_watchers: list[Callable[[ResponsibilityMap], None]] = []
        #: Rule 8: told when this relay serves again, one lease after it came back.
        self.back_watchers: list[Callable[[], None]] = []
        self.lapses = 0
        self._lapsed = False
        self._serving_from = 0.0  # loop time: back in the map, serving again from then
        self._timer: asyncio.TimerHandle | None = None  # fires when the lease as renewed lapses
        self._back: asyncio.TimerHandle | None = None  # fires when it serves again
        self._keys = [
            f"{{{NAMESPACE}}}:deadlines",
            f"{{{NAMESPACE}}}:urls",
            f"{{{NAMESPACE}}}:standby",
            f"{{{NAMESPACE}}}:assigned",
        ]
        #: Rule 7: held by each beat; beats begun so far.
        self._beating = asyncio.Lock()
        self._beats_begun = 0
        self._beat = redis.register_script(BEAT)
        self._leave = redis.register_script(LEAVE)
        self._assign = redis.register_script(ASSIGN)
        self._unassign = redis.register_script(UNASSIGN)
        self._warmed = redis.register_script(WARMED)

    async def beat(self, join: bool = True) -> ResponsibilityMap:
        """Renew (``join``) or only read, and take the live members as the map (rules 3, 7).

        Raises:
            RedisError: Redis could not be reached or refused the script.
        """
        async with self._beating:
            return await self._beat_now(join)

    async def fresh(self) -> ResponsibilityMap:
        """The map as read by a beat begun after this call (rule 7): one begun before may
        have been answered before a change the caller was told of; callers waiting together
        share one read.

        Raises:
            RedisError: Redis could not be reached or refused the script.
        """
        asked = self._beats_begun
        async with self._beating:
            if self._beats_begun > asked:  # begun after the call, and over: the lock is ours
                return self.map
            return await self._beat_now(join=False)

    async def confirm(self, request: Subscribe) -> None:
        """If the map as last read would redirect ``request`` (new, not marked ``stay``),
        read it afresh (rule 7); Redis away, the map as last read stands (rule 5)."""
        if redirect(self.map, self.name, request, False) is None:
            return
        try:
            await self.fresh()
        except REDIS_FAILURES as error:
            log.warning("registry: reading the map before a redirect failed: %s", error)

    async def _beat_now(self, join: bool) -> ResponsibilityMap:
        self._beats_begun += 1
        args: list[Any] = (
            [self.name, self.url, int(self.lease * 1000), "1" if self.standby else "0"]
            if join
            else ["", "", 0, "0"]
        )
        loop = asyncio.get_running_loop()
        sent = loop.time()
        flat_members, standby, flat_assigned = await self._beat(keys=self._keys, args=args)
        if join:
            self._renewed(sent, loop)
        texts, held = _texts(flat_members), _texts(flat_assigned)
        members = dict(zip(texts[0::2], texts[1::2], strict=True))
        assigned = {
            part: Assignment.parse(value)
            for part, value in zip(held[0::2], held[1::2], strict=True)
        }
        after = ResponsibilityMap(members, self.map.side, frozenset(_texts(standby)), assigned)
        before, self.map = self.map, after
        if dict(before.members) != members:
            log.info("registry: members now %s", ", ".join(sorted(members)) or "none")
        if (dict(before.members), before.standby, dict(before.assigned)) != (
            members,
            after.standby,
            assigned,
        ):
            self.changes += 1
            if self.on_change is not None:
                self.on_change(before, after)
            for watcher in self.watchers:
                watcher(before, after)
        return after

    def _renewed(self, sent: float, loop: asyncio.AbstractEventLoop) -> None:
        """A join beat sent at ``sent`` came back: the lease holds until ``sent + lease``
        (rule 8); a relay whose lease had lapsed serves again one lease from now."""
        now = loop.time()
        if self._timer is not None:
            self._timer.cancel()
            if not self._lapsed and now >= self._timer.when():
                self._lapse()  # the timer was late: the lease ran out before this reply
        if now >= sent + self.lease:
            # An answer too late to hold the lease (held by the network, or Redis slow): the
            # relay stays lapsed; the next beat, sent now, may bring it back.
            self._lapse()
            return
        if self._lapsed:
            self._lapsed = False
            self._serving_from = now + self.lease
            self._back = loop.call_at(self._serving_from, self._serving_again)
            log.warning("registry: back in the map; serving again in %g s", self.lease)
        self._timer = loop.call_at(sent + self.lease, self._lapse)

    def _lapse(self) -> None:
        """Rule 8: the lease ran out unrenewed; serve nothing until back in the map."""
        if self._lapsed:
            return
        self._lapsed, self._timer = True, None
        if self._back is not None:
            self._back.cancel()
            self._back = None
        self.lapses += 1
        log.warning("registry: lease lapsed (Redis away): this relay owns no part")
        without = self._without_me()
        for watcher in self.lapse_watchers:
            watcher(without)

    def _serving_again(self) -> None:
        """Rule 8: a lease after coming back, this relay owns its parts again."""
        self._back = None
        log.info("registry: serving again")
        for watcher in self.back_watchers:
            watcher()

    @property
    def serving(self) -> bool:
        """Whether this relay's lease is its own (rule 8): not lapsed, and not waiting after
        coming back."""
        return not self._lapsed and asyncio.get_running_loop().time() >= self._serving_from

    def _without_me(self) -> ResponsibilityMap:
        members = {name: url for name, url in self.map.members.items() if name != self.name}
        return self.map.with_members(members)

    def elsewhere(self, dataset: str, view: View, sub: int) -> Error:
        """What answers (or ends) subscription ``sub`` while this relay is not ``serving``
        (``redirects.elsewhere``)."""
        return elsewhere(self.map, self.name, dataset, view, sub)

    async def assign(
        self, target: str, parts: list[str], warm: Mapping[str, str] | None = None
    ) -> None:
        """Hand ``parts`` (this relay's) to member ``target`` (rule 6), then read the map;
        ``warm``: part -> what ``target`` acquires before this relay ends the part's
        subscriptions (a view's text; a part without one is ready at once: rule 6).

        Raises:
            HandOverRefused: a relay is not live, the members changed since this relay's map
                was read, or a part is assigned to another relay.
            RedisError: Redis could not be reached.
        """
        owners = sorted(name for name in self.map.members if name not in self.map.standby)
        args: list[str | int] = [self.name, target, len(owners), *owners]
        for part in parts:
            text = (warm or {}).get(part, "")
            args += [part, Assignment(target, self.name, not text, text).stored()]
        try:
            await self._assign(keys=self._keys, args=args)
        except ResponseError as error:
            raise HandOverRefused(f"handing {len(parts)} parts to {target}: {error}") from None
        await self.beat()

    async def warmed(self, parts: list[str]) -> int:
        """Say that this relay holds ready what it was to warm for ``parts`` (rule 6), then
        read the map.

        Returns:
            How many of them were assigned to it and waiting.

        Raises:
            RedisError: Redis could not be reached.
        """
        count = int(await self._warmed(keys=self._keys[3:], args=[self.name, *parts]))
        await self.beat()
        return count

    async def unassign(self, parts: list[str]) -> int:
        """Hand back the ``parts`` assigned to this relay (rule 6), then read the map.

        Returns:
            How many were handed back.

        Raises:
            RedisError: Redis could not be reached.
        """
        count = int(await self._unassign(keys=self._keys[3:], args=[self.name, *parts]))
        await self.beat()
        return count

    async def run(self, joined: Callable[[], None] | None = None) -> None:
        """Join, then keep the lease and follow the map until cancelled; leave on the way out.

        Raises:
            RedisError: the first join failed (the relay should not start without its map).
        """
        try:
            await self.beat()
            if joined is not None:
                joined()
            while True:
                cancelling.check()  # a cancel the Redis client swallowed
                await asyncio.sleep(self.lease / 3)
                try:
                    await self.beat()
                except REDIS_FAILURES as error:  # rule 5: keep the last map, try again
                    self.failed_beats += 1
                    log.warning("registry: a beat failed, keeping the last map: %s", error)
        finally:
            for timer in (self._timer, self._back):
                if timer is not None:
                    timer.cancel()
            await self.leave()

    async def leave(self) -> None:
        """Remove this member at once (rule 4); a failure, or no answer within
        ``REDIS_TIMEOUT`` seconds (rule 5), is logged (its lease will run out)."""
        try:
            async with asyncio.timeout(REDIS_TIMEOUT):
                await self._leave(keys=self._keys, args=[self.name])
        except (*REDIS_FAILURES, TimeoutError) as error:
            log.warning("registry: leaving failed, the lease will run out: %r", error)
        finally:
            try:
                async with asyncio.timeout(REDIS_TIMEOUT):
                    await self.redis.aclose()
            except TimeoutError:
                log.warning("registry: closing the Redis client took over %g s", REDIS_TIMEOUT)

    # -- what the relay asks ------------------------------------------------------------------

    def redirect(self, request: Subscribe, held: bool) -> Error | None:
        """The redirect answering ``request`` here, or None to serve it (``redirects``; rule
        8 while not ``serving``, ``stay`` or not)."""
        answer = redirects.answer(self.map, self.name, self.serving, request, held)
        if answer is not None:
            self.redirected += 1
        return answer

    def samples(self) -> list[Sample]:
        """The registry's figures for ``GET /metrics``."""
        return [
            Sample(
                "relay_registry_members", "gauge", "Live relays in the map.", len(self.map.members)
            ),
            Sample(
                "relay_registry_changes",
                "counter",
                "Times the map's members were read changed.",
                self.changes,
            ),
            Sample(
                "relay_registry_failed_beats",
                "counter",
                "Lease renewals that failed (Redis away).",
                self.failed_beats,
            ),
            Sample(
                "relay_registry_assigned",
                "gauge",
                "Parts splits assigned in the map as this relay last read it (all relays').",
                len(self.map.assigned),
            ),
            Sample(
                "relay_registry_lapses",
                "counter",
                "Times this relay's lease lapsed unrenewed (it then served nothing).",
                self.lapses,
            ),
            Sample(
                "relay_registry_serving",
                "gauge",
                "1 while this relay's lease is its own and it serves its parts, else 0.",
                int(self.serving),
            ),
            redirected(self.redirected),
        ]


def redirected(count: int) -> Sample:
    """``relay_redirected_total``: the new subscriptions a relay (or a worker) redirected."""
    return Sample(
        "relay_redirected",
        "counter",
        "New subscriptions answered with a redirect to the responsible relay.",
        count,
    )


def _texts(items: list[Any]) -> list[str]:
    return [item.decode() if isinstance(item, bytes) else str(item) for item in items]
