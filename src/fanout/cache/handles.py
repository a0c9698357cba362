"""What a snoopy cache hands the application: handles found by key, label collections, and
iterators over its changes (``cache.client``). The reference is ``docs/caches.md``."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from fanout.cache.core import Change, Ref
from fanout.wire.bus import Row

if TYPE_CHECKING:
    from fanout.cache.client import SnoopyCache

#: Changes one ``events()`` iterator holds at most (the oldest is dropped beyond).
EVENTS_QUEUED = 10_000


class Handle:
    """An object found by key (rule 1): nothing is loaded until ``get``."""

    def __init__(self, cache: SnoopyCache, ref: Ref) -> None:
        self.cache = cache
        self.ref = ref

    async def get(self) -> Row | None:
        """The object's state, None if it does not exist.

        Raises:
            LoadTimeout: it could not be loaded in the cache's ``load_wait`` seconds.
        """
        return await self.cache._get(self.ref)

    async def listening(self) -> None:
        """Return once the NATS server has this handle's subscription: from then on, every
        message about the object reaches the cache (``find_by_key`` returns before that)."""
        await self.cache._listening(self.ref)

    @property
    def version(self) -> int:
        """The version held (-1: none)."""
        return self.cache.core.shown_floor(self.ref)


class Collection:
    """A followed label pattern's objects (kept current by snooping)."""

    def __init__(self, cache: SnoopyCache, collection: int, type_name: str, pattern: str) -> None:
        self.cache = cache
        self.id = collection
        self.type_name = type_name
        self.pattern = pattern

    def keys(self) -> set[int | str]:
        """The keys of the objects it holds now."""
        return set(self.cache.core.collections[self.id].members)

    def items(self) -> dict[int | str, Row]:
        """key -> state of the objects it holds now."""
        objects = self.cache.core.objects
        out: dict[int | str, Row] = {}
        for key in self.keys():
            entry = objects.get((self.type_name, key))
            if entry is not None and entry.row is not None:
                out[key] = entry.row
        return out

    async def close(self) -> None:
        """Stop following it."""
        await self.cache._unfollow(self)


class Events:
    """An async iterator over a cache's changes (``SnoopyCache.events``): it collects from the
    moment it is made, not from its first ``__anext__``."""

    def __init__(self, queues: list[asyncio.Queue[Change]]) -> None:
        self._queues = queues
        self._queue: asyncio.Queue[Change] = asyncio.Queue(EVENTS_QUEUED)
        queues.append(self._queue)

    def __aiter__(self) -> Events:
        return self

    async def __anext__(self) -> Change:
        if self._queue not in self._queues:
            raise StopAsyncIteration
        return await self._queue.get()

    async def aclose(self) -> None:
        """Stop collecting."""
        if self._queue in self._queues:
            self._queues.remove(self._queue)
