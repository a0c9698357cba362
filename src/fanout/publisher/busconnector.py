"""The publisher as the database connector on a NATS subject bus (Liebig et al., §3-§4): the
asyncio shell around ``publisher.bustable``. The reference is ``docs/caches.md``.

It runs its own event loop on a thread beside Spark's driver, like the control plane. Spark's
micro-batch callback hands it each opted-in dataset's changed rows (``publish_changes``), which
it publishes on the loop; ``LOAD``, ``QUERY`` and ``TYPES`` requests are answered on the same
loop, so everything about one object leaves in version order (``publisher.bustable``).

The bus never holds the pipeline up: a micro-batch waits at most ``PUBLISH_WAIT`` seconds for
its messages to reach the server, and a bus that is away (NATS reconnects by itself, forever)
costs the caches messages, which they fetch again when they reconnect (``docs/caches.md``), not
the relays their batches. Malformed requests are counted and dropped; requests for a type whose
table is not ready yet (``ObjectTable.ready``: before the stream caught up) are dropped too, and
asked again by the caches.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec
import nats
import pyarrow as pa
from nats.aio.client import Client
from nats.aio.msg import Msg

from fanout.publisher.bustable import ObjectTable, Outgoing
from fanout.publisher.datasets import DELETED, VERSION
from fanout.wire.bus import (
    LOAD,
    QUERY,
    InvalidLabel,
    InvalidSubject,
    LoadRequest,
    QueryReply,
    QueryRequest,
    Row,
    TypesReply,
    types_subject,
)

log = logging.getLogger(__name__)

#: Seconds a micro-batch waits at most for its messages to reach the NATS server.
PUBLISH_WAIT = 5
#: Seconds to wait for the first connection to the NATS server when starting.
CONNECT_WAIT = 30.0


@dataclass
class BusCounters:
    """What the connector did since it started."""

    published: int = 0
    written: int = 0  # of which published at once, from durable writes
    loads: int = 0
    queries: int = 0
    malformed: int = 0
    unknown_type: int = 0
    late: int = 0
    not_ready: int = 0
    per_type_loads: dict[str, int] = field(default_factory=dict)


class BusConnector:
    """The connector's NATS connection and its types' tables."""

    def __init__(self, url: str, domain: str, tables: dict[str, ObjectTable]) -> None:
        self.url = url
        self.domain = domain
        self.tables = tables
        self.counters = BusCounters()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._nc: Client | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Connect and subscribe on a daemon thread; returns once subscribed.

        Raises:
            OSError, nats.errors.Error: the server could not be reached in ``CONNECT_WAIT``.
        """
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                asyncio.run(self._run(ready))
            except BaseException as exc:  # reported to the starting thread below
                failure.append(exc)
                ready.set()

        self._thread = threading.Thread(target=run, name="fanout-bus", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]

    async def _run(self, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        self._nc = await nats.connect(
            self.url,
            name="fanout-publisher",
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
            connect_timeout=CONNECT_WAIT,
            allow_reconnect=True,
            disconnected_cb=self._disconnected,
            reconnected_cb=self._reconnected,
            error_cb=self._error,
        )
        await self._nc.subscribe(f"{LOAD}.*.*.{self.domain}", cb=self._on_load)
        await self._nc.subscribe(f"{QUERY}.*.{self.domain}", cb=self._on_query)
        await self._nc.subscribe(types_subject(self.domain), cb=self._on_types)
        await self._nc.flush()
        log.info(
            "bus: connected to %s, domain %s, types %s",
            self.url,
            self.domain,
            ", ".join(self.tables),
        )
        ready.set()
        await self._stopped.wait()
        try:
            await self._nc.drain()
        except nats.errors.Error as exc:  # closed already, or the server went away
            log.debug("bus connector: draining on stop: %r", exc)

    def stop(self) -> None:
        """Drain and close the connection (thread-safe)."""
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None:
            self._thread.join(timeout=10)

    async def _disconnected(self) -> None:
        if self._stopped is None or not self._stopped.is_set():
            log.warning("bus: disconnected from %s; reconnecting", self.url)

    async def _reconnected(self) -> None:
        log.info("bus: reconnected to %s", self.url)

    async def _error(self, exc: Exception) -> None:
        log.warning("bus: %s", exc)

    # -- micro-batches ---------------------------------------------------------------------------

    def publish_changes(
        self, type_name: str, rows: pa.Table, request: str, load: Callable[[], pa.Table] | None
    ) -> None:
        """Publish one micro-batch's changed rows of ``type_name`` (blocking, at most
        ``PUBLISH_WAIT`` seconds).

        Args:
            type_name: the dataset.
            rows: its changed rows, with ``_version`` and ``_deleted``.
            request: the micro-batch's request id (``b<epoch>.<seq>``).
            load: the live rows before this micro-batch, with ``_version`` (called when the
                table is not loaded yet: after a restart).
        """
        table = self.tables[type_name]
        before = load() if load is not None and not table.loaded else None
        values = rows.drop_columns([c for c in rows.column_names if c.startswith("_")])
        changed = values.to_pylist()
        versions = rows.column(VERSION).to_pylist()
        deleted = rows.column(DELETED).fill_null(False).to_pylist()

        async def publish() -> None:
            if before is not None:
                public = before.drop_columns([c for c in before.column_names if c[0] == "_"])
                table.load(public.to_pylist(), before.column(VERSION).to_pylist())
                log.info("bus: %s loaded with %d live objects", type_name, len(table))
            out = table.changes(changed, versions, deleted, request, time.time())
            await self._send(out)
            assert self._nc is not None
            if self._nc.is_connected:
                # Away, the messages wait in the client's buffer: the micro-batch does not.
                await self._flush()

        if self._loop is None:
            raise RuntimeError("the bus connector is not started")
        future = asyncio.run_coroutine_threadsafe(publish(), self._loop)
        try:
            future.result(PUBLISH_WAIT)
        except TimeoutError:
            # The table was updated; what did not reach the server, caches fetch again.
            self.counters.late += 1
            log.warning(
                "bus: micro-batch %s of %s not flushed in %gs", request, type_name, PUBLISH_WAIT
            )

    def publish_written(
        self, type_name: str, rows: list[Row], versions: list[int], deleted: list[bool]
    ) -> None:
        """Publish a durable write's rows at once, before a micro-batch carries them
        (``ObjectTable.written``); thread-safe, and it does not wait. It never fails the write,
        which is logged: a connector not running (yet, or any more) leaves it to the
        micro-batch."""
        loop = self._loop
        if loop is None or loop.is_closed():
            self.counters.late += 1
            return
        table = self.tables[type_name]

        async def publish() -> None:
            out = table.written(rows, versions, deleted, "written", time.time())
            self.counters.written += len(out)
            await self._send(out)

        try:
            future = asyncio.run_coroutine_threadsafe(publish(), loop)
        except RuntimeError:  # its loop closed meanwhile (stopping)
            self.counters.late += 1
            return
        future.add_done_callback(_logged)

    def idle(self, type_name: str) -> None:
        """The stream of ``type_name`` is idle after a micro-batch: its table is ready
        (``ObjectTable.ready``); thread-safe."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.tables[type_name].mark_ready)

    async def _send(self, out: list[Outgoing]) -> None:
        assert self._nc is not None
        try:
            for subject, message in out:
                await self._nc.publish(subject, msgspec.msgpack.encode(message))
                self.counters.published += 1
        except nats.errors.Error as exc:
            # Away too long (the reconnect buffer is full) or closed: the caches fetch again
            # when they reconnect; the pipeline goes on.
            self.counters.late += 1
            log.warning("bus: publishing failed: %s", exc)

    async def _flush(self) -> None:
        assert self._nc is not None
        try:
            await self._nc.flush(timeout=PUBLISH_WAIT)
        except (nats.errors.TimeoutError, nats.errors.ConnectionClosedError) as exc:
            log.warning("bus: flush failed: %s", exc)

    # -- requests --------------------------------------------------------------------------------

    def _table(self, type_name: str) -> ObjectTable | None:
        table = self.tables.get(type_name)
        if table is None:
            self.counters.unknown_type += 1
            log.warning("bus: a request for unknown type %r dropped", type_name)
        return table

    async def _on_load(self, msg: Msg) -> None:
        """``LOAD.<type>.<key>.<domain>``: publish the object's ``LOADREPLY`` (rule 3)."""
        try:
            _, type_name, key, _ = msg.subject.split(".")
            request = msgspec.msgpack.decode(msg.data, type=LoadRequest).request
            table = self._table(type_name)
            if table is None:
                return
            if not table.ready:
                # Before the stream caught up, "not there" could be a lie: the cache asks
                # again (every LOAD_RETRY seconds) until the table is ready.
                self.counters.not_ready += 1
                return
            out = table.load_reply(key, request, time.time())
        except (ValueError, msgspec.DecodeError, InvalidSubject) as exc:
            self.counters.malformed += 1
            log.warning("bus: malformed LOAD on %s dropped: %s", msg.subject, exc)
            return
        self.counters.loads += 1
        self.counters.per_type_loads[type_name] = self.counters.per_type_loads.get(type_name, 0) + 1
        await self._send(out)

    async def _on_query(self, msg: Msg) -> None:
        """``QUERY.<type>.<domain>``: publish the pattern's objects, answer their count."""
        try:
            _, type_name, _ = msg.subject.split(".")
            query = msgspec.msgpack.decode(msg.data, type=QueryRequest)
        except (ValueError, msgspec.DecodeError) as exc:
            self.counters.malformed += 1
            log.warning("bus: malformed QUERY on %s dropped: %s", msg.subject, exc)
            return
        table = self._table(type_name)
        if table is not None and not table.ready:
            self.counters.not_ready += 1
            return  # not answered: the cache asks again (as for a LOAD)
        if table is None:
            reply = QueryReply(query.request, 0, f"unknown type {type_name!r}")
        else:
            try:
                out, count = table.query(query.pattern, query.request, time.time())
            except InvalidLabel as exc:
                reply = QueryReply(query.request, 0, str(exc))
            else:
                await self._send(out)
                reply = QueryReply(query.request, count)
        self.counters.queries += 1
        if msg.reply:
            await msg.respond(msgspec.msgpack.encode(reply))

    async def _on_types(self, msg: Msg) -> None:
        """``TYPES.<domain>``: which types are served."""
        if msg.reply:
            reply = TypesReply({name: t.kind.info for name, t in self.tables.items()})
            await msg.respond(msgspec.msgpack.encode(reply))


def _logged(future: concurrent.futures.Future[None]) -> None:
    """A write published at once that failed: logged (the micro-batch carries it)."""
    if not future.cancelled() and future.exception() is not None:
        log.warning("bus: a write was not published at once: %s", future.exception())
