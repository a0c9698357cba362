"""PPS objects through the library: write objects at the publisher, read them at a relay in full or
delta mode, blocking or not (US 9,026,567, QNX PPS; docs/objects.md).

```python
async with connect(RELAY) as subscriber, open_producer(PUBLISHER) as producer:
    objects = Objects(subscriber, producer, "pps")
    await objects.write("/cars/c1", "speed:n:42\\n[q=3]state::moving\\n")
    watch = await objects.open("/cars/.all?delta,wait")
    print(await watch.read())      # the first read: every object of /cars in full
    print(await watch.read())      # blocks until something changes: +@c2, @c1 speed:n:43, -@c1...
```

Each :meth:`Objects.open` is one subscription at the relay (delta and ``deltadir`` ones in mode
``every`` unless ``f=`` compares), with its own copy and change status (``views.objects.reading``):
two delta readers of one object each get every change once, whenever each reads.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fanout.background import Background
from fanout.client.publisher import PublisherClient
from fanout.client.subscriber import LiveView, Subscriber, SubscriptionError, Update
from fanout.errors import InvalidView, InvalidWrite
from fanout.views.objects import ObjectPath
from fanout.views.objects.reading import DEFAULT_BACKLOG, ChangeStatus, apply_push, full_text
from fanout.views.objects.store import (
    DIRECTORY_MARK,
    KEY,
    OBJECT_MARK,
    VOLATILE,
    Cell,
    ObjectStore,
    Row,
    cell_key,
    check_object_path,
)
from fanout.views.objects.text import DeleteAttribute, SetAttribute, Value, WriteLine, parse_write
from fanout.wire.messages import Mode

#: Pushes a second an object subscription asks for (a change shows within 1/RATE s of the relay
#: having it).
RATE = 100.0


class ObjectFile:
    """One open object (``/dir/obj``) or directory (``/dir/.all``), read in PPS modes.

    Attributes:
        path: the path with its open options; ``delta`` and ``wait`` say how :meth:`read` reads.
        store: this reader's copy of the cells the path selects.
    """

    def __init__(self, path: ObjectPath, live: LiveView, tasks: Background) -> None:
        self.path = path
        self.live = live
        self.store = ObjectStore()
        self.status = ChangeStatus(path.backlog or DEFAULT_BACKLOG, names_only=path.deltadir)
        self.error: SubscriptionError | None = None
        #: Called (on the connection's loop) each time the file turns :attr:`readable`.
        self.on_readable: Callable[[], None] | None = None
        self._version = 0  # pushes that changed something (or were full)
        self._read_version = -1
        self._changed = asyncio.Event()
        # Opened and closed like a file (PPS), with no block of its own: its follower is a task
        # of its connection's (``tasks``), cancelled and awaited by ``close``, and ended with
        # the connection at the latest (its view then fails).
        self._task = tasks.start(self._follow())

    @property
    def ready(self) -> bool:
        """Whether the first push has arrived."""
        return self._version > 0

    @property
    def queued(self) -> bool:
        """Delta and ``deltadir`` reads: changes queued per reader (else each read is full)."""
        return self.path.delta or self.path.deltadir

    @property
    def readable(self) -> bool:
        """Whether a blocking read would return at once: something new, or the error."""
        if self.error is not None:
            return True
        if not self.ready:
            return False
        if self.queued:
            return self.status.pending
        return self._read_version != self._version

    async def started(self) -> None:
        """Return once the first push has arrived.

        Raises:
            SubscriptionError: the subscription ended first.
        """
        while not self.ready:
            if self.error is not None:
                raise self.error
            self._changed.clear()
            await self._changed.wait()

    async def read(self, wait: bool | None = None) -> str:
        """The next read, in PPS text (``views.objects.reading``, rules 2-4).

        Args:
            wait: block until there is something new (default: the path's ``wait`` option).
                The first read waits for the subscription's first push in any case.

        Returns:
            Full mode: the object(s) in full (``""``: the object does not exist). Delta mode:
            the changes since this reader's previous read; ``""`` when there are none and
            ``wait`` is off.

        Raises:
            SubscriptionError: the relay ended the subscription, or the connection was lost.
        """
        wait = self.path.wait if wait is None else wait
        while True:
            if self.error is not None:
                raise self.error
            if self.ready:
                text = self._take(wait)
                if text is not None:
                    return text
            self._changed.clear()
            await self._changed.wait()

    def _take(self, wait: bool) -> str | None:
        if self.queued:
            if self.status.pending:
                return self.status.take(self.store, self.path.object_path)
            return None if wait else ""
        if wait and self._read_version == self._version:
            return None
        self._read_version = self._version
        return full_text(self.store, self.path.object_path)

    async def close(self) -> None:
        """Unsubscribe and stop following."""
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, SubscriptionError):
            await self._task
        with contextlib.suppress(SubscriptionError):
            await self.live.close()

    async def _follow(self) -> None:
        try:
            async for update in self.live:
                self._apply(update)
            self.error = SubscriptionError("closed", f"{self.path.path}: subscription ended")
        except SubscriptionError as error:
            self.error = error
        self._changed.set()
        self._tell()

    def _apply(self, update: Update) -> None:
        upserts = _rows(update.entered) + _rows(update.updated)
        deletes = [str(key) for key in update.left.tolist()]
        if update.full:
            kept = {row["cell"] for row in upserts}
            deletes = [key for key in self.store.cells if key not in kept]
        notices = apply_push(self.store, upserts, deletes)
        if update.full and self.ready and self.live.mode == "every":
            self.status.overflow()  # a resync: the relay could not give the seqs between
        else:
            self.status.offer(notices)
        if notices or update.full:
            self._version += 1
            self._changed.set()
            if self.readable:
                self._tell()

    def _tell(self) -> None:
        if self.on_readable is not None:
            self.on_readable()


class Objects:
    """One ``objects`` dataset: reads at a relay, writes at the publisher.

    Args:
        subscriber: a relay connection (``client.connect``), or None to write only.
        producer: a publisher connection (``client.publisher.open_producer``) to write to; None
            writes through the relay, which forwards each write to the publisher.
        dataset: the dataset's name.
    """

    def __init__(
        self, subscriber: Subscriber | None, producer: PublisherClient | None, dataset: str
    ) -> None:
        self.subscriber = subscriber
        self.producer = producer
        self.dataset = dataset

    async def open(self, path: str, rate: float = RATE) -> ObjectFile:
        """Subscribe to an object or a directory's ``.all``, with PPS open options.

        Args:
            path: e.g. ``/cars/c1``, ``/cars/c1?delta,wait``, ``/cars/.all?delta,f=speed>50``.

        Raises:
            InvalidView: a malformed path or option.
            SubscriptionError: the relay refused it or the connection is lost.
        """
        if self.subscriber is None:
            raise SubscriptionError("read_only", "these objects have no relay connection to read")
        view = ObjectPath(path)
        if view.critical:
            raise InvalidView(
                f"{path!r}: 'critical' marks a writer (the mount's write handles); a reader"
                " takes no 'critical'"
            )
        if view.notify is not None:
            raise InvalidView(
                f"{path!r}: notification groups are a mount's (/.notify); in the library, wait"
                " on several ObjectFile.read() at once (asyncio.wait)"
            )
        # every seq in order for queued reads; an f= comparison reads several cells, so
        # those are served in mode latest (relay.kinds.objects)
        every = (view.delta or view.deltadir) and not view.filters
        mode: Mode = "every" if every else "latest"
        live = await self.subscriber.subscribe(view, self.dataset, rate=rate, mode=mode)
        return ObjectFile(view, live, self.subscriber.tasks)

    async def write(
        self, path: str, lines: str | Sequence[WriteLine], *, persist: bool = True
    ) -> tuple[int, int]:
        """Write attributes of object ``path`` (creating it), durably at the publisher.

        Args:
            path: the object, e.g. ``/cars/c1``.
            lines: PPS text (``speed:n:42``, ``[q=3,n]state::on``, ``-error``) or parsed lines.
                Of several lines for one attribute the last counts.
            persist: whether the object, if this creates it, survives a publisher restart.

        Returns:
            The ingest-log offsets of the cells the publisher admitted.

        Raises:
            InvalidWrite: malformed text or path (checked here, before anything is sent).
            SubscriptionError: the publisher refused the write (``bad_request``: nothing of it
                was applied) or the connection is lost.
        """
        parsed = parse_write(lines) if isinstance(lines, str) else list(lines)
        check_object_path(path)
        last: dict[str, WriteLine] = {line.name: line for line in parsed}
        marker = Cell(path, OBJECT_MARK, Value("", ""), 0, persist).row()
        upserts: list[Row] = [marker]
        upserts += [_attribute_row(path, line) for line in last.values() if _is_set(line)]
        deletes = [cell_key(path, line.name) for line in last.values() if not _is_set(line)]
        return await self._publish(upserts, deletes)

    async def delete(self, path: str) -> tuple[int, int]:
        """Delete object ``path`` and its attributes (see :meth:`write` for errors)."""
        return await self._publish([], [cell_key(check_object_path(path), OBJECT_MARK)])

    async def purge(self, path: str) -> tuple[int, int]:
        """Delete the non-persistent attributes of object ``path``, as PPS does when a
        ``critical`` writer closes (see :meth:`write` for errors)."""
        return await self._publish([], [cell_key(check_object_path(path), VOLATILE)])

    async def make_directory(self, path: str) -> tuple[int, int]:
        """Create directory ``path`` and its missing parents (see :meth:`write` for errors)."""
        row = Cell(check_object_path(path, "directory"), DIRECTORY_MARK, Value("", ""), 0, True)
        return await self._publish([row.row()], [])

    async def remove_directory(self, path: str) -> tuple[int, int]:
        """Remove the empty directory ``path`` (see :meth:`write` for errors)."""
        return await self._publish([], [cell_key(check_object_path(path, "directory"), "/")])

    async def _publish(self, upserts: list[Row], deletes: list[str]) -> tuple[int, int]:
        if self.producer is not None:
            return await self.producer.publish(self.dataset, upserts, deletes)
        if self.subscriber is not None:  # the relay forwards it to the publisher
            return await self.subscriber.publish(self.dataset, upserts, deletes, key=KEY)
        raise InvalidWrite("these objects have no connection to write through")


def _is_set(line: WriteLine) -> bool:
    return not isinstance(line, DeleteAttribute)


def _attribute_row(path: str, line: WriteLine) -> Row:
    assert isinstance(line, SetAttribute)
    return Cell(path, line.name, line.value, line.quality, line.persist).row()


def _rows(columns: dict[str, np.ndarray[Any, Any]]) -> list[dict[str, Any]]:
    if not columns:
        return []
    names = list(columns)
    return [
        dict(zip(names, values, strict=True))
        for values in zip(*(columns[name].tolist() for name in names), strict=True)
    ]
