"""A snoopy object cache for applications (Liebig et al., §4.1.1-4.1.2): the asyncio shell on
NATS (and PostgreSQL for writes) around ``cache.core``. The reference, with an example and each
rule in full, is docs/caches.md.

1. **Handles at once, loads on first access**: a ``LOAD`` only if nothing about the object was
   snooped meanwhile (``cache.requests``); concurrent accesses share one load.
2. **Snooping.** Every message under a subject listened to is taken if newer (``cache.core``);
   the application is told through callbacks and ``events()``. ``snoop=False`` takes only its
   own load replies for objects it holds no state of (``bench/snoopy.py``'s baseline).
3. **Reconnects.** After NATS reconnects, every object held and collection followed is loaded
   again (``refetches``): what was published meanwhile was lost to the cache.
4. **Writes go to the database, not the cache** (``cache.writes``); the change comes back.
5. **Bad input.** A malformed message is counted and dropped; an unknown type or a bad label
   pattern is raised at once.
6. **Bounded**: ``capacity`` unpinned objects; ``EVENTS_QUEUED`` changes per ``events()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

import nats
import psycopg
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from fanout.background import Background
from fanout.cache.catalog import LoadTimeout, UnknownType, fetch_types
from fanout.cache.core import CacheCore, Change, Counters, Reassembly, Ref
from fanout.cache.handles import Collection, Events, Handle
from fanout.cache.incoming import MALFORMED, read
from fanout.cache.requests import Requests
from fanout.cache.writes import NotStored, Transaction
from fanout.wire.bus import (
    Row,
    TypeInfo,
    check_name,
    label_filter,
    object_filter,
    pattern_tokens,
)

T = TypeVar("T")
log = logging.getLogger(__name__)

#: Seconds an access, a query or ``connect`` waits at most for the connector (by default).
LOAD_WAIT = 60.0


@dataclass
class ShellCounters:
    """The shell's counts (the core's are in ``Counters``)."""

    loads_sent: int = 0
    refetches: int = 0
    reconnects: int = 0
    events_dropped: int = 0
    foreign_ignored: int = 0


class SnoopyCache:
    """A snoopy object cache on one NATS connection (see the module docstring)."""

    def __init__(
        self,
        nc: Client,
        domain: str,
        types: dict[str, TypeInfo],
        *,
        capacity: int,
        snoop: bool,
        db: str | None,
        load_wait: float = 0.0,
    ) -> None:
        self.nc = nc
        self.domain = domain
        self.types = types
        self.snoop = snoop
        self.db = db
        self.load_wait = load_wait or LOAD_WAIT
        self.core = CacheCore(capacity)
        self.reassembly = Reassembly()
        self.shell = ShellCounters()
        self.requests = Requests(nc, domain, self.load_wait, self._load_sent)
        self._subs: dict[Ref, asyncio.Future[Subscription]] = {}
        self._labels: dict[int, tuple[Subscription, Collection]] = {}
        self._callbacks: list[Callable[[Change], None]] = []
        self._queues: list[asyncio.Queue[Change]] = []
        # The cache's tasks (subscribing, loading, refetching) run in a TaskGroup entered by
        # ``connect`` and left by ``close``.
        self._background = Background()
        self._lifetime = contextlib.AsyncExitStack()
        self._closing = False
        self._loading: dict[Ref, asyncio.Future[None]] = {}

    # -- connecting ------------------------------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        url: str,
        domain: str,
        *,
        db: str | None = None,
        capacity: int = 10_000,
        snoop: bool = True,
        name: str = "fanout-cache",
        load_wait: float = LOAD_WAIT,
    ) -> SnoopyCache:
        """Connect to NATS and ask the connector which types it serves.

        Args:
            url: the NATS server(s), ``nats://host:port``.
            domain: the connector's data source domain (its ``[bus] domain``).
            db: the PostgreSQL database writes go to (None: this cache does not write).
            capacity: objects held at most besides those followed collections pin.
            snoop: take other caches' load replies (rule 2; False only for comparisons).
            name: the connection's name on the NATS server.
            load_wait: seconds a load or a query (and this connect) waits at most for the
                connector (a publisher still starting answers after its first micro-batch).

        Raises:
            InvalidSubject: ``domain`` is not a name.
            LoadTimeout: no connector answered in ``load_wait`` seconds.
            OSError, nats.errors.Error: NATS could not be reached.
        """
        check_name(domain, "the domain")
        holder: list[SnoopyCache] = []

        async def reconnected() -> None:
            if holder:
                holder[0]._on_reconnected()

        async def disconnected() -> None:
            if not (holder and holder[0]._closing):
                log.warning("cache: disconnected from NATS; reconnecting")

        nc = await nats.connect(
            url,
            name=name,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            allow_reconnect=True,
            reconnected_cb=reconnected,
            disconnected_cb=disconnected,
            error_cb=_error,
        )
        try:
            types = await fetch_types(nc, domain, load_wait)
        except BaseException:
            await nc.close()
            raise
        cache = cls(nc, domain, types, capacity=capacity, snoop=snoop, db=db, load_wait=load_wait)
        await cache._lifetime.enter_async_context(cache._background)
        holder.append(cache)
        return cache

    async def close(self) -> None:
        """Stop listening and close the connection."""
        self._closing = True
        self._background.cancel()
        await self._lifetime.aclose()
        try:
            await self.nc.drain()
        except (
            nats.errors.Error
        ) as exc:  # closed already, or the server went away: nothing to drain
            log.debug("cache: draining on close: %r", exc)

    async def __aenter__(self) -> SnoopyCache:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _load_sent(self) -> None:
        self.shell.loads_sent += 1

    @property
    def counters(self) -> Counters:
        """The core's counts (hits, faults, snooped, stale, evicted, malformed)."""
        return self.core.counters

    # -- finding ---------------------------------------------------------------------------------

    def find_by_key(self, type_name: str, key: int | str) -> Handle:
        """A handle to object ``key`` of ``type_name``, at once (rule 1).

        Raises:
            UnknownType: the connector does not serve ``type_name``.
            TypeError: ``key`` is not of the type's key kind.
        """
        info = self._type(type_name)
        if info.integer_key != (isinstance(key, int) and not isinstance(key, bool)):
            kind = "an integer" if info.integer_key else "a string"
            raise TypeError(f"type {type_name!r} has {kind} key, not {key!r}")
        ref: Ref = (type_name, key)
        self._want(ref)
        return Handle(self, ref)

    async def find_by_label(self, type_name: str, pattern: str) -> Collection:
        """The objects of ``type_name`` whose label ``pattern`` selects, kept current.

        Returns once the connector's reply to the query has arrived in full.

        Raises:
            UnknownType: the connector does not serve ``type_name``.
            InvalidLabel: ``pattern`` is not a label pattern.
            LoadTimeout: the query was not answered in ``load_wait`` seconds.
        """
        self._type(type_name)
        tokens = pattern_tokens(pattern)
        collection = Collection(self, self.core.follow(type_name, tokens), type_name, pattern)
        subject = label_filter("*", type_name, self.domain, pattern)
        sub = await self.nc.subscribe(subject, cb=self._on_object)
        self._labels[collection.id] = (sub, collection)
        await self.requests.query(type_name, pattern)
        return collection

    async def _unfollow(self, collection: Collection) -> None:
        sub, _ = self._labels.pop(collection.id)
        self.core.unfollow(collection.id)
        try:
            await sub.unsubscribe()
        except nats.errors.Error as exc:  # the connection closed meanwhile: nothing is held
            log.debug("cache: unsubscribing %s: %r", collection.id, exc)

    def _type(self, type_name: str) -> TypeInfo:
        info = self.types.get(type_name)
        if info is None:
            served = ", ".join(sorted(self.types)) or "none"
            raise UnknownType(f"unknown type {type_name!r} (the connector serves: {served})")
        return info

    def _want(self, ref: Ref) -> None:
        for gone in self.core.want(ref):
            self._drop_subscription(gone)
        if ref not in self._subs:
            subject = object_filter("*", ref[0], ref[1], self.domain)
            self._subs[ref] = self._shared(self.nc.subscribe(subject, cb=self._on_object))

    async def _listening(self, ref: Ref) -> None:
        if ref not in self._subs:
            self._want(ref)
        await self._subs[ref]
        await self.nc.flush()

    def _drop_subscription(self, ref: Ref) -> None:
        task = self._subs.pop(ref, None)
        if task is not None:
            self._spawn(_unsubscribe(task))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        self._background.start(work)

    def _shared(self, work: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        """``work`` run in the cache's group, its outcome in a future for whoever awaits it:
        its error is theirs (a load timing out), not the group's."""
        outcome: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        async def run() -> None:
            try:
                outcome.set_result(await work)
            except asyncio.CancelledError:
                outcome.cancel()
                raise
            except Exception as error:  # handed to whoever awaits the outcome
                outcome.set_exception(error)

        self._background.start(run())
        return outcome

    # -- loading ---------------------------------------------------------------------------------

    async def _get(self, ref: Ref) -> Row | None:
        entry = self.core.read(ref)
        if entry is not None:
            return entry.row
        if ref not in self.core.objects:
            self._want(ref)  # evicted since it was found: found again
        self.core.fault(ref)
        loading = self._loading.get(ref)
        if loading is None:
            # One load however many accesses wait for it (rule 1).
            loading = self._loading[ref] = self._shared(self._load([ref]))
            loading.add_done_callback(lambda _: self._loading.pop(ref, None))
        await asyncio.shield(loading)
        held = self.core.objects.get(ref)
        if held is None or not held.valid:
            # Evicted while loading (a tiny capacity): load once more, held this time.
            self._want(ref)
            await self._load([ref])
            held = self.core.objects[ref]
        return held.row

    async def _load(self, refs: list[Ref]) -> None:
        """Send ``LOAD`` for ``refs`` and wait until each has its reply (rule 1)."""
        await self.requests.load(refs, self._subscribed)

    async def _subscribed(self, ref: Ref) -> None:
        if ref in self._subs:
            await self._subs[ref]

    # -- snooping (rule 2) -----------------------------------------------------------------------

    async def _on_object(self, msg: Msg) -> None:
        try:
            self._take(msg)
        except MALFORMED as exc:
            self.core.counters.malformed += 1
            log.warning("cache: malformed message on %s dropped: %s", msg.subject, exc)
        finally:
            self.requests.wake()

    def _take(self, msg: Msg) -> None:
        incoming = read(msg.subject, msg.data, self.domain, self.types, self.reassembly)
        if incoming is None:
            return  # more fragments to come
        ref, message = incoming.ref, incoming
        own = self.requests.note(message.request, ref, message.kind)
        if not self.snoop and not own:
            entry = self.core.objects.get(ref)
            if message.kind == "LOADREPLY" or entry is None or not entry.valid:
                self.shell.foreign_ignored += 1
                return
        change = self.core.offer(
            message.kind,
            ref,
            version=message.version,
            row=message.row,
            label=message.label,
            sent=message.sent,
            own=own,
        )
        for gone in self.core.evicted:
            self._drop_subscription(gone)
        self.core.evicted.clear()
        if change is not None:
            self._tell(change)

    # -- telling the application -----------------------------------------------------------------

    def on_change(self, callback: Callable[[Change], None]) -> None:
        """Call ``callback`` with every change taken (on the event loop; keep it short)."""
        self._callbacks.append(callback)

    def events(self) -> Events:
        """Every change taken from the moment this is called, in the order taken (rule 6:
        bounded); ``aclose()`` it when done."""
        return Events(self._queues)

    def _tell(self, change: Change) -> None:
        for callback in self._callbacks:
            try:
                callback(change)
            except Exception:
                log.exception("cache: a change callback failed")
        for queue in self._queues:
            if queue.full():
                queue.get_nowait()
                self.shell.events_dropped += 1
            queue.put_nowait(change)

    # -- reconnecting (rule 3) -------------------------------------------------------------------

    def _on_reconnected(self) -> None:
        self.shell.reconnects += 1
        self._spawn(self._refetch())

    async def _refetch(self) -> None:
        held = [ref for ref, entry in self.core.objects.items() if entry.valid]
        self.shell.refetches += 1
        log.info("cache: reconnected; loading %d objects again", len(held))
        try:
            if held:
                await self._load(held)
            for _, collection in list(self._labels.values()):
                await self.requests.query(collection.type_name, collection.pattern)
        except (LoadTimeout, nats.errors.Error) as exc:
            log.warning("cache: refetch after a reconnect incomplete: %s", exc)

    # -- writing (rule 4) ------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """A PostgreSQL transaction: committed when the block ends, rolled back if it raises.

        Raises:
            NotStored: this cache was connected without ``db``.
        """
        if self.db is None:
            raise NotStored("this cache was connected without db=: it cannot write")
        connection = await psycopg.AsyncConnection.connect(self.db)
        async with connection, connection.transaction():
            yield Transaction(self._type, connection)

    async def save(self, type_name: str, row: Row) -> None:
        """Insert or update one object in its own transaction (rule 4).

        Raises:
            UnknownType, NotStored: see ``Transaction.save``.
        """
        async with self.transaction() as tx:
            await tx.save(type_name, row)

    async def delete(self, type_name: str, key: int | str) -> None:
        """Delete one object in its own transaction (rule 4)."""
        async with self.transaction() as tx:
            await tx.delete(type_name, key)


async def _unsubscribe(subscribing: asyncio.Future[Subscription]) -> None:
    try:
        await (await subscribing).unsubscribe()
    except (nats.errors.Error, asyncio.CancelledError) as exc:  # closed meanwhile: nothing held
        log.debug("cache: unsubscribing: %r", exc)


async def _error(exc: Exception) -> None:
    log.warning("cache: NATS: %s", exc)


__all__ = [
    "Change",
    "Collection",
    "Events",
    "Handle",
    "LoadTimeout",
    "NotStored",
    "SnoopyCache",
    "Transaction",
    "UnknownType",
]
