"""The members of the map of responsibility, kept in Redis Cluster with leases: the thin shell
around ``relay.cluster.responsibility``.

Rules:

1. **One slot.** The members are two keys sharing the hash tag ``{NAMESPACE}``, so they live on
   one Redis Cluster node and one Lua script reads and writes both atomically: a sorted set of
   names scored by their lease's deadline and a hash of names to URLs.
2. **Leases on Redis's clock.** Deadlines are computed inside the script from the node's
   ``TIME``, so relays on hosts whose clocks disagree still agree on who is alive.
3. **A beat.** Every ``lease / 3`` seconds a member renews its lease, removes the members whose
   lease ran out, and reads the live ones, in one round trip (``BEAT``). A relay killed leaves
   the map within a lease (plus a beat of whoever reads it next); a relay that stalled past its
   lease and was removed is put back by its next beat; a relay restarted under the same name
   joins again at once (its URL is overwritten).
4. **Told when it changes.** When the live members read differ from the last ones,
   ``on_change(before, after)`` is called with both maps.
5. **Leaving.** A relay stopped cleanly removes itself at once, so its parts move without waiting
   for its lease.
6. **Redis away.** A beat that fails is logged and retried at the next; the relay keeps its last
   map meanwhile (and the others drop it once its lease runs out).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from fanout.metrics import Sample
from fanout.relay.cluster.redirects import redirect
from fanout.relay.cluster.responsibility import DEFAULT_SIDE, ResponsibilityMap
from fanout.relay.cluster.settings import registry_address
from fanout.wire.messages import Error, Subscribe

log = logging.getLogger(__name__)

#: The hash tag every key of the map shares (rule 1).
NAMESPACE = "fanout-map"

#: KEYS: the sorted set of deadlines, the hash of URLs. ARGV: name, URL, lease in ms (a name of
#: "" only reads). Returns a flat list name, URL, name, URL, ... of the live members.
BEAT = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ms)
for _, name in ipairs(dead) do
  redis.call('ZREM', KEYS[1], name)
  redis.call('HDEL', KEYS[2], name)
end
if ARGV[1] ~= '' then
  redis.call('ZADD', KEYS[1], ms + tonumber(ARGV[3]), ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
end
local live = redis.call('ZRANGE', KEYS[1], 0, -1)
local out = {}
for _, name in ipairs(live) do
  table.insert(out, name)
  table.insert(out, redis.call('HGET', KEYS[2], name) or '')
end
return out
"""

LEAVE = """
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
"""


def connect(address: str) -> RedisCluster:
    """A client of the Redis Cluster one of whose nodes is ``address``.

    Args:
        address: ``redis://host:port`` or ``host:port``.

    Raises:
        ConfigError: the address is not of that form.
    """
    host, port = registry_address(address)
    return RedisCluster(host=host, port=port)


class Registry:
    """This relay's membership of the map, and the map as last read (rules 3-6)."""

    def __init__(
        self,
        redis: RedisCluster,
        name: str,
        url: str = "",
        *,
        lease: float = 3.0,
        side: float = DEFAULT_SIDE,
        on_change: Callable[[ResponsibilityMap, ResponsibilityMap], None] | None = None,
    ) -> None:
        """A member named ``name``, reached at ``url`` (set it before ``run`` if not known
        yet), holding a lease of ``lease`` seconds.

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
        self.changes = 0
        self.failed_beats = 0
        self.redirected = 0
        self._keys = [f"{{{NAMESPACE}}}:deadlines", f"{{{NAMESPACE}}}:urls"]
        self._beat = redis.register_script(BEAT)
        self._leave = redis.register_script(LEAVE)

    async def beat(self, join: bool = True) -> ResponsibilityMap:
        """Renew (``join``) or only read, and take the live members as the map (rule 3).

        Raises:
            RedisError: Redis could not be reached or refused the script.
        """
        args: list[Any] = [self.name, self.url, int(self.lease * 1000)] if join else ["", "", 0]
        flat = await self._beat(keys=self._keys, args=args)
        texts = [item.decode() if isinstance(item, bytes) else str(item) for item in flat]
        members = dict(zip(texts[0::2], texts[1::2], strict=True))
        after = self.map.with_members(members)
        before, self.map = self.map, after
        if dict(before.members) != members:
            self.changes += 1
            log.info("registry: members now %s", ", ".join(sorted(members)) or "none")
            if self.on_change is not None:
                self.on_change(before, after)
        return after

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
                await asyncio.sleep(self.lease / 3)
                try:
                    await self.beat()
                except RedisError as error:  # rule 6: keep the last map, try again
                    self.failed_beats += 1
                    log.warning("registry: a beat failed, keeping the last map: %s", error)
        finally:
            await self.leave()

    async def leave(self) -> None:
        """Remove this member at once (rule 5); a failure is logged (its lease will run out)."""
        try:
            await self._leave(keys=self._keys, args=[self.name])
        except RedisError as error:
            log.warning("registry: leaving failed, the lease will run out: %s", error)
        finally:
            await self.redis.aclose()

    # -- what the relay asks ------------------------------------------------------------------

    def redirect(self, request: Subscribe, held: bool) -> Error | None:
        """The redirect answering ``request`` here, or None to serve it (``redirects``)."""
        answer = redirect(self.map, self.name, request, held)
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
                "relay_redirected",
                "counter",
                "New subscriptions answered with a redirect to the responsible relay.",
                self.redirected,
            ),
        ]
