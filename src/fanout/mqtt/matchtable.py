"""The shared match table of IPCOM000235838D in Redis Cluster: every relay's MQTT subscriptions in
one distributed table, so a publication is matched against all relays' subscriptions without
flooding and without proxy subscriptions (the layout: docs/mqtt.md, "How it is built"). Rules:

1. **Entries.** One Redis hash per topic-filter prefix, every entry on a filter's path changed
   in one Lua step, so that concurrent writers commute.
2. **Lookup** walks only the branches a topic can match, one pipelined round trip per level.
3. **Caching.** A bounded LRU, emptied by the invalidations' Redis stream and ``max_age``.
4. **Leases.** Lookups return relays whose lease is alive, or that the caller knows alive (an
   open link); a restarted relay takes a new incarnation name; any relay may ``sweep`` a dead
   one's filters once its address has lapsed too (``ADDRESS_LEASES`` leases after it renewed).
5. **Vouching.** ``vouch`` renews the lease and address of the relays one holds an open link
   to: one cut from Redis but not from its peers stays alive to the cluster (looked up, never
   swept). One swept all the same writes its filters again whole (``register``) once it can.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import ResponseError

from fanout.views.topic.syntax import parse_filter, topic_levels

#: Decrements one field, deleting it at 0 or below, atomically on its key.
DECREMENT = """
local v = redis.call('HINCRBY', KEYS[1], ARGV[1], -tonumber(ARGV[2]))
if v <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
return v
"""
STREAM_LENGTH = 10_000
#: A relay's peer address lives this many leases after its last renewal: for that long a relay
#: stalled past its lease (a loaded host, a slow Redis) can still be reached, and is not swept.
ADDRESS_LEASES = 3


@dataclass
class Entry:
    """One row of the table: a filter prefix's next levels and subscribers."""

    children: set[str]
    relays: dict[str, int]
    groups: dict[str, dict[str, int]]
    at: float = 0.0

    @classmethod
    def read(cls, fields: dict[Any, Any], now: float) -> Entry:
        """The entry whose Redis hash is ``fields`` (bytes or str)."""
        children: set[str] = set()
        relays: dict[str, int] = {}
        groups: dict[str, dict[str, int]] = {}
        for raw_name, raw_value in fields.items():
            name = raw_name.decode() if isinstance(raw_name, bytes) else raw_name
            count = int(raw_value)
            kind, rest = name[:2], name[2:]
            if kind == "c:":
                children.add(rest)
            elif kind == "s:":
                relays[rest] = count
            elif kind == "g:":
                group, _, relay = rest.rpartition("/")
                groups.setdefault(group, {})[relay] = count
        return cls(children, relays, groups, now)


@dataclass
class Matches:
    """Who wants a topic: relays with matching plain filters, and each matching share group's
    relays (by ``GROUP/filter-prefix``, one entry per shared subscription)."""

    relays: set[str] = field(default_factory=set)
    shared: dict[str, set[str]] = field(default_factory=dict)


def entry_key(levels: tuple[str, ...]) -> str:
    """Rule 1's prefix of ``levels``: each level followed by ``/``."""
    return "".join(level + "/" for level in levels)


def path_fields(filter: str, relay: str) -> list[tuple[str, str]]:
    """(entry prefix, field) of every field adding ``filter`` for ``relay`` increments."""
    parts = parse_filter(filter)
    levels = parts.levels
    fields = [(entry_key(levels[:i]), "c:" + levels[i]) for i in range(len(levels))]
    own = f"g:{parts.share_group}/{relay}" if parts.share_group is not None else f"s:{relay}"
    return [*fields, (entry_key(levels), own)]


class MatchTable:
    """One relay's view of the shared table in a Redis Cluster (``redis.asyncio.RedisCluster``).

    Attributes:
        lookups: entries fetched from Redis so far; rounds: round trips they took;
        cache_hits: entries served from the cache.
    """

    def __init__(
        self,
        redis: Any,
        relay: str,
        *,
        namespace: str = "fanout:mt:",
        lease: float = 3.0,
        cache_size: int = 10_000,
        max_age: float = 5.0,
    ) -> None:
        """A table for ``relay`` (an incarnation name: rule 4) over the client ``redis``."""
        self.redis, self.relay, self.namespace = redis, relay, namespace
        self.lease, self.cache_size, self.max_age = lease, cache_size, max_age
        self.lookups = self.rounds = self.cache_hits = 0
        self._cache: OrderedDict[str, Entry] = OrderedDict()
        self._stream = namespace + "invalidations"
        self._seen = "$"
        self._alive: dict[str, tuple[bool, float]] = {}
        self._decrement = redis.register_script(DECREMENT)

    # -- writes ----------------------------------------------------------------------------

    async def add(self, filter: str) -> None:
        """Hold one more subscription of this relay to ``filter``.

        Raises:
            InvalidView: ``filter`` is not a valid topic filter.
        """
        fields = path_fields(filter, self.relay)
        pipe = self.redis.pipeline()
        for prefix, name in fields:
            pipe.hincrby(self.namespace + prefix, name, 1)
        pipe.hincrby(self._filters_key(self.relay), filter, 1)
        pipe.sadd(self.namespace + "relays", self.relay)
        await pipe.execute()
        await self._invalidate([prefix for prefix, _ in fields])

    async def remove(self, filter: str) -> None:
        """Hold one subscription of this relay to ``filter`` less (it must be held)."""
        await self._decrement(keys=[self._filters_key(self.relay)], args=[filter, 1])
        await self._remove(filter, self.relay, 1)

    async def _remove(self, filter: str, relay: str, count: int) -> None:
        fields = path_fields(filter, relay)
        for prefix, name in fields:
            await self._decrement(keys=[self.namespace + prefix], args=[name, count])
        await self._invalidate([prefix for prefix, _ in fields])

    async def sweep(self, linked: Collection[str] = ()) -> list[str]:
        """Remove the filters of every relay whose lease and address expired (rule 4) but those
        in ``linked`` (the caller's open links say they live); the relays swept."""
        swept = []
        for relay in await self.relays():
            keys = (self._lease_key(relay), self.address_key(relay))
            if relay == self.relay or relay in linked or await self.redis.exists(*keys):
                continue
            claimed = self._filters_key(relay) + ":swept"
            try:
                await self.redis.rename(self._filters_key(relay), claimed)
            except ResponseError as error:  # the list is gone: another relay swept it
                if "no such key" not in str(error).lower():
                    raise
                await self.redis.srem(self.namespace + "relays", relay)
                continue
            for filter, count in (await self.redis.hgetall(claimed)).items():
                text = filter.decode() if isinstance(filter, bytes) else filter
                await self._remove(text, relay, int(count))
            await self.redis.delete(claimed)
            await self.redis.srem(self.namespace + "relays", relay)
            swept.append(relay)
        return swept

    async def relays(self) -> set[str]:
        """Every relay with filters in the table (swept ones are not)."""
        return {_text(raw) for raw in await self.redis.smembers(self.namespace + "relays")}

    async def register(self, counts: Mapping[str, int]) -> None:
        """Write this relay's subscriptions again whole (``counts``: filter -> subscriptions
        held), after a sweep removed them (rule 5)."""
        held = {text: count for text, count in counts.items() if count > 0}
        prefixes: list[str] = []
        pipe = self.redis.pipeline()
        for text, count in held.items():
            for prefix, name in path_fields(text, self.relay):
                pipe.hincrby(self.namespace + prefix, name, count)
                prefixes.append(prefix)
            pipe.hincrby(self._filters_key(self.relay), text, count)
        pipe.sadd(self.namespace + "relays", self.relay)
        await pipe.execute()
        await self._invalidate(list(dict.fromkeys(prefixes)))

    async def registered(self) -> bool:
        """Whether this relay is in the table's list of relays (not swept)."""
        return bool(await self.redis.sismember(self.namespace + "relays", self.relay))

    async def vouch(self, relays: Collection[str]) -> None:
        """Renew the lease and keep the address of each of ``relays`` (rule 5): the caller holds
        an open link to each, so each lives whatever Redis last heard from it."""
        if not relays:
            return
        ttl = int(self.lease * 1000 * ADDRESS_LEASES)
        pipe = self.redis.pipeline()
        for relay in relays:
            pipe.set(self._lease_key(relay), b"1", px=int(self.lease * 1000))
            pipe.pexpire(self.address_key(relay), ttl)
        await pipe.execute()

    def _filters_key(self, relay: str) -> str:
        # The relay's name as a hash tag: its list and the list renamed live in one slot.
        return f"{self.namespace}filters:{{{relay}}}"

    async def renew(self) -> None:
        """Renew this relay's lease (rule 4): call it more often than ``lease`` seconds."""
        await self.redis.set(self._lease_key(self.relay), b"1", px=int(self.lease * 1000))

    async def _invalidate(self, prefixes: list[str]) -> None:
        await self.redis.xadd(
            self._stream, {"p": "\n".join(prefixes)}, maxlen=STREAM_LENGTH, approximate=True
        )
        for prefix in prefixes:
            self._cache.pop(prefix, None)

    async def advertise(self, address: str) -> None:
        """Renew this relay's peer address (``HOST:PORT``), kept ``ADDRESS_LEASES`` leases."""
        ttl = int(self.lease * 1000 * ADDRESS_LEASES)
        await self.redis.set(self.address_key(self.relay), address, px=ttl)

    def address_key(self, relay: str) -> str:
        """The key of ``relay``'s peer address."""
        return f"{self.namespace}addr:{relay}"

    def _lease_key(self, relay: str) -> str:
        return f"{self.namespace}lease:{relay}"

    # -- cache -----------------------------------------------------------------------------

    async def follow_invalidations(self, block_ms: int | None = None) -> int:
        """Read the invalidation stream once (waiting up to ``block_ms``, None: not waiting);
        the number of cached entries dropped."""
        if self._seen == "$":
            last = await self.redis.xrevrange(self._stream, count=1)
            self._seen = _text(last[0][0]) if last else "0-0"
        answer = await self.redis.xread({self._stream: self._seen}, block=block_ms, count=1000)
        dropped = 0
        if answer and await self._fell_behind():
            dropped += len(self._cache)
            self._cache.clear()  # what was trimmed away unread is unknown: rule 3
        for _, messages in _stream_items(answer):
            for ident, body in messages:
                self._seen = _text(ident)
                text = _text(body.get(b"p", body.get("p", b"")))
                for prefix in text.split("\n"):
                    dropped += self._cache.pop(prefix, None) is not None
        return dropped

    async def _fell_behind(self) -> bool:
        info = await self.redis.xinfo_stream(self._stream)
        deleted = info.get("max-deleted-entry-id", b"0-0")
        return _id(deleted) > _id(self._seen)

    # -- lookups ---------------------------------------------------------------------------

    async def _entries(self, prefixes: list[str]) -> dict[str, Entry]:
        """The entries of ``prefixes``: cached ones, the rest in one pipelined round trip."""
        now = time.monotonic()
        found: dict[str, Entry] = {}
        missing = []
        for prefix in dict.fromkeys(prefixes):
            entry = self._cache.get(prefix)
            if entry is not None and now - entry.at < self.max_age:
                self._cache.move_to_end(prefix)
                found[prefix] = entry
                self.cache_hits += 1
            else:
                missing.append(prefix)
        if missing:
            pipe = self.redis.pipeline()
            for prefix in missing:
                pipe.hgetall(self.namespace + prefix)
            for prefix, fields in zip(missing, await pipe.execute(), strict=True):
                entry = Entry.read(fields, now)
                found[prefix] = entry
                self._cache[prefix] = entry
            self.lookups += len(missing)
            self.rounds += 1
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return found

    async def match(self, topic: str, linked: Collection[str] = ()) -> Matches:
        """Every live relay with a filter matching ``topic`` (rule 2), and the share groups;
        the relays in ``linked`` are alive whatever their lease says (rule 4).

        Raises:
            InvalidView: ``topic`` is not a valid topic name.
        """
        levels = topic_levels(topic)
        dollar = levels[0].startswith("$")
        frontier: list[tuple[str, ...]] = [()]
        entries = await self._entries([""])
        hits: list[tuple[str, ...]] = []
        for depth, level in enumerate(levels):
            wild = not (depth == 0 and dollar)
            following: list[tuple[str, ...]] = []
            for prefix in frontier:
                children = entries[entry_key(prefix)].children
                if wild and "#" in children:
                    hits.append((*prefix, "#"))
                if level in children:
                    following.append((*prefix, level))
                if wild and "+" in children:
                    following.append((*prefix, "+"))
            frontier = following
            wanted = [entry_key(p) for p in frontier + hits if entry_key(p) not in entries]
            if wanted:
                entries.update(await self._entries(wanted))
        for prefix in frontier:
            hits.append(prefix)
            if "#" in entries[entry_key(prefix)].children:
                hits.append((*prefix, "#"))
        wanted = [entry_key(p) for p in hits if entry_key(p) not in entries]
        if wanted:
            entries.update(await self._entries(wanted))
        return await self._alive_only(hits, entries, linked)

    async def _alive_only(
        self, hits: list[tuple[str, ...]], entries: dict[str, Entry], linked: Collection[str]
    ) -> Matches:
        matches = Matches()
        candidates: set[str] = set()
        for prefix in hits:
            entry = entries[entry_key(prefix)]
            candidates.update(entry.relays)
            for members in entry.groups.values():
                candidates.update(members)
        alive = await self._leases(candidates - set(linked)) | (candidates & set(linked))
        for prefix in hits:
            key = entry_key(prefix)
            entry = entries[key]
            matches.relays.update(r for r in entry.relays if r in alive)
            for group, members in entry.groups.items():
                live = {r for r in members if r in alive}
                if live:
                    matches.shared.setdefault(f"{group}/{key}", set()).update(live)
        return matches

    async def _leases(self, relays: set[str]) -> set[str]:
        """The relays among ``relays`` whose lease is alive (looked up at most every lease/4)."""
        now = time.monotonic()
        unknown = [r for r in relays if now - self._alive.get(r, (False, -1e9))[1] > self.lease / 4]
        if unknown:
            pipe = self.redis.pipeline()
            for relay in unknown:
                pipe.exists(self._lease_key(relay))
            for relay, exists in zip(unknown, await pipe.execute(), strict=True):
                self._alive[relay] = (bool(exists), now)
            self.rounds += 1
        return {r for r in relays if self._alive[r][0]}


def _id(ident: Any) -> tuple[int, int]:
    text = ident.decode() if isinstance(ident, bytes) else str(ident)
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _stream_items(answer: Any) -> list[tuple[Any, list[tuple[Any, dict[Any, Any]]]]]:
    """XREAD's answer as (stream, messages) pairs, whichever shape the client gives."""
    if not answer:
        return []
    if isinstance(answer, dict):
        return [
            (name, list(messages[0] if messages and isinstance(messages[0], list) else messages))
            for name, messages in answer.items()
        ]
    return [(name, messages) for name, messages in answer]
