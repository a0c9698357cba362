"""A view held through a relay: its materialised rows and its stream of updates
(``fanout.client.subscriber`` holds the connection that feeds it)."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from fanout.errors import FanoutError, ProtocolError
from fanout.views import View
from fanout.wire.columns import Columns as Payload
from fanout.wire.columns import decode_columns, encode_columns, key_column, to_python
from fanout.wire.messages import (
    Mode,
    NoUpdate,
    Push,
    Resume,
    Subscribe,
    Subscribed,
    Transform,
    Unsubscribe,
)

if TYPE_CHECKING:
    from fanout.client.subscriber import Subscriber

Columns = dict[str, npt.NDArray[Any]]


class SubscriptionError(FanoutError):
    """The relay refused or ended a subscription; ``code`` is the relay's error code.

    ``location``: with code ``redirect``, the URL of the relay responsible for the subscription
    (``fanout.client.following`` follows it).
    """

    def __init__(self, code: str, message: str, location: str | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.location = location


@dataclass(frozen=True)
class Update:
    """One push (or no-update) of a view, as received.

    Attributes:
        tick: the publisher tick the view's content is at.
        seq: the publisher micro-batch it was cut from; epoch: the stream it belongs to.
        full: the first push of the subscription (``entered`` is the whole view).
        entered, updated: rows column by column; left: keys that left the view.
        received_at: wall-clock time of arrival; tick_time: wall-clock time of the tick.
    """

    sub: int
    epoch: int
    seq: int
    tick: int
    full: bool
    entered: Columns
    updated: Columns
    left: npt.NDArray[Any]
    tick_time: float
    received_at: float

    @property
    def no_update(self) -> bool:
        """Nothing in the view changed (the relay's no-update message)."""
        return not (self.full or self.entered or self.updated or len(self.left))

    def changed(self) -> int:
        """Rows entered, updated or left in this update."""
        count = len(self.left)
        for rows in (self.entered, self.updated):
            if rows:
                count += len(next(iter(rows.values())))
        return count


@dataclass
class LiveView:
    """A subscription's materialised rows and its stream of updates."""

    sub: int
    dataset: str
    view: View
    key: str
    columns: list[str]
    subscriber: Subscriber
    rows: dict[Any, dict[str, Any]] = field(default_factory=dict)
    epoch: int = -1
    seq: int = -1
    tick: int = -1
    updates: int = 0
    dropped: int = 0
    error: SubscriptionError | None = None
    buffer: int = 256
    priority: int = 0
    transform: Transform | None = None
    mode: Mode = "latest"
    resyncs: int = 0
    gaps: int = 0
    moves: int = 0
    _queue: deque[Update] = field(default_factory=deque)
    _signal: asyncio.Event = field(default_factory=asyncio.Event)
    _closed: bool = False
    _waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)

    def __aiter__(self) -> AsyncIterator[Update]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Update]:
        while True:
            while self._queue:
                yield self._queue.popleft()
            if self.error is not None:
                raise self.error
            if self._closed:
                return
            self._signal.clear()
            await self._signal.wait()

    async def wait_updates(self, count: int = 1) -> None:
        """Return once ``count`` more updates have been applied to ``rows``.

        Raises:
            SubscriptionError: the subscription ended first.
        """
        if self.error is not None:
            raise self.error
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((self.updates + count, future))
        await future

    def token(self) -> Resume:
        """Where this view is: (epoch, seq, keys held), to resume an ``every`` subscription."""
        keys = list(self.rows)
        if keys and all(isinstance(k, int) for k in keys):
            column: npt.NDArray[Any] = np.array(sorted(keys), dtype=np.int64)
        else:
            column = np.array(sorted(keys), dtype=object)
        return Resume(self.epoch, self.seq, encode_columns({self.key: column}))

    async def change(self, view: View, rate: float | None = None) -> None:
        """Move the view; the next update is a delta against the rows held.

        An ``every`` subscription's view cannot change (the relay refuses it and ends the
        subscription): unsubscribe, and subscribe to the new view.
        """
        self.view = view
        await self.subscriber._send(
            Subscribe(
                self.sub, self.dataset, view, rate or self.rate, self.priority, self.transform
            )
        )

    @property
    def effective_transform(self) -> Transform:
        """The transform the relay applies: the one asked for, as the capabilities allow."""
        return (self.transform or Transform()).negotiate(self.subscriber.capabilities)

    @property
    def rate(self) -> float:
        """Pushes per second asked for."""
        return self.subscriber._rates[self.sub]

    async def close(self) -> None:
        """Unsubscribe; iteration ends once the relay confirms."""
        await self.subscriber._send(Unsubscribe(self.sub))

    def _apply(self, frame: Push | NoUpdate) -> Update:
        if isinstance(frame, NoUpdate):
            update = Update(
                frame.sub,
                frame.epoch,
                frame.seq,
                frame.tick,
                False,
                {},
                {},
                np.empty(0, np.int64),
                0.0,
                time.time(),
            )
        else:
            update = self._apply_push(frame)
        if self.mode == "every" and not update.full and update.seq != self.seq + 1:
            self.gaps += 1  # a relay broke its promise; counted so that tests can see it
        self.epoch, self.seq, self.tick = update.epoch, update.seq, update.tick
        self.updates += 1
        if self.mode == "latest" and len(self._queue) >= self.buffer:
            self._queue.popleft()
            self.dropped += 1
        self._queue.append(update)
        self._signal.set()
        self._wake_waiters()
        return update

    def _wake_waiters(self) -> None:
        waiting = []
        for target, future in self._waiters:
            if future.done():
                continue
            if self.error is not None:
                future.set_exception(self.error)
            elif self._closed or self.updates >= target:
                future.set_result(None)
            else:
                waiting.append((target, future))
        self._waiters = waiting

    def _apply_push(self, push: Push) -> Update:
        entered = self._rows_of(push.entered, "entered")
        updated = self._rows_of(push.updated, "updated")
        left = key_column(push.left, self.key, f"push for subscription {self.sub}: left")
        if left.dtype.kind in "iu":
            left = left.astype(np.int64)
        if push.full:
            self.rows.clear()
        for key in left.tolist():
            self.rows.pop(key, None)
        for columns in (entered, updated):
            if columns:
                names = list(columns)
                for values in zip(*(to_python(columns[n]) for n in names), strict=True):
                    row = dict(zip(names, values, strict=True))
                    self.rows[row[self.key]] = row
        return Update(
            push.sub,
            push.epoch,
            push.seq,
            push.tick,
            push.full,
            entered,
            updated,
            left,
            push.tick_time,
            time.time(),
        )

    def _rows_of(self, columns: Payload, section: str) -> Columns:
        """A push's section decoded; rows must carry the key.

        Raises:
            ProtocolError: the section does not decode, or holds rows without the key column.
        """
        decoded = decode_columns(columns)
        if columns.length and self.key not in decoded:
            raise ProtocolError(
                f"push for subscription {self.sub}: {columns.length} {section} rows without"
                f" the key column {self.key!r}"
            )
        return decoded

    def _continue(self, earlier: LiveView) -> None:
        """Start where ``earlier`` (a view of an ended connection) stopped: its rows, its
        seq, and the updates it received that its iteration had not yet yielded (they come
        first here: the token counts them, so the relay sends only what follows them)."""
        self.rows = dict(earlier.rows)
        self.epoch, self.seq, self.tick = earlier.epoch, earlier.seq, earlier.tick
        self.resyncs, self.gaps = earlier.resyncs, earlier.gaps
        self._queue.extendleft(reversed(earlier._queue))
        earlier._queue.clear()
        if self._queue:
            self._signal.set()

    def _moved_to(self, subscriber: Subscriber, sub: int, subscribed: Subscribed) -> LiveView:
        """Be held by ``subscriber`` as its subscription ``sub`` from now on (its part moved to
        that relay): rows, seq and updates not yet yielded stay; a ``latest`` view's next
        push is full and replaces the rows, an ``every`` view's continues after its seq."""
        self.subscriber, self.sub = subscriber, sub
        self.key, self.columns = subscribed.key, subscribed.columns
        self.moves += 1
        return self

    def _end(self, error: SubscriptionError | None) -> None:
        self.error = error
        self._closed = True
        self._signal.set()
        self._wake_waiters()
