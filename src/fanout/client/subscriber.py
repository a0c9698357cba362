"""The subscriber side: connect to a relay, hold views, receive their updates.

    async with connect("ws://127.0.0.1:7701") as sub:
        view = await sub.subscribe(Box((0, 0), (100, 100)), dataset="agents")
        async for update in view:
            print(update.tick, len(view.rows))

A ``LiveView`` keeps the materialised rows of its view (``view.rows``), applied from every push in
order as frames arrive, so they are exact whether or not the program iterates. Iteration yields
``Update`` notifications through a bounded buffer: if the program falls behind, the oldest
notifications are dropped (counted in ``view.dropped``) — never the rows.

A subscription may ask the relay to adapt its rows (``transform=Transform(...)``: projection,
float32, fixed-point, coordinates relative to an entity) and to favour it over the connection's
other subscriptions (``priority``). Rows hold the values as sent: float32 values as Python
floats, ``fixed`` values as integers counting ``view.effective_transform.quantum``; the
``capabilities`` given to :func:`connect` decide what the relay may send (see
``Transform.negotiate``).

``mode="every"`` asks for every change, in order, exactly once: one update per publisher seq (a
push, or a no-update when nothing in the view changed), none coalesced, none dropped from the
iteration buffer. ``view.token()`` is where it stopped; after a disconnect, subscribe again —
on the same relay or another — with ``resume=old_view`` and the new view continues with the old
rows from the next seq, with no gap and no duplicate. Updates the old view received but its
iteration had not yielded yet (frames still arriving while its connection closed) are yielded
first by the new view, so an iterating program misses none of them::

    view = await sub.subscribe(box, mode="every")
    ...  # the connection drops
    async with connect(other_relay) as sub2:
        view = await sub2.subscribe(box, mode="every", resume=view)

If the seqs it missed are no longer in the publisher's log, the relay says so (``view.resyncs``
counts it) and starts again with a full push: never a silent loss.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from ssl import SSLContext
from typing import Any

import numpy as np
import numpy.typing as npt
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from fanout import tls
from fanout.connection import close_reason, dial, greet
from fanout.errors import FanoutError, ProtocolError
from fanout.views import View
from fanout.wire import codec
from fanout.wire.columns import Columns as Payload
from fanout.wire.columns import decode_columns, encode_columns, key_column, to_python
from fanout.wire.messages import (
    PROTOCOL_VERSION,
    Error,
    Hello,
    Mode,
    NoUpdate,
    Publish,
    Published,
    Push,
    Resume,
    Subscribe,
    Subscribed,
    Transform,
    Unsubscribe,
    Unsubscribed,
)
from fanout.wire.session import check_welcome

Columns = dict[str, npt.NDArray[Any]]

#: Largest frame accepted from a relay (a first push of a large view).
MAX_FRAME = 256 << 20
#: The view kind of each index kind named otherwise: a ``space`` index takes region views.
VIEW_KINDS = {"space": "region", "objects": "path"}


class SubscriptionError(FanoutError):
    """The relay refused or ended a subscription; ``code`` is the relay's error code.

    ``location``: with code ``redirect``, the URL of the relay responsible for the subscription
    (``fanout.client.cluster`` follows it).
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

    def _end(self, error: SubscriptionError | None) -> None:
        self.error = error
        self._closed = True
        self._signal.set()
        self._wake_waiters()


class Subscriber:
    """One connection to a relay, holding any number of views."""

    def __init__(
        self,
        websocket: ClientConnection,
        buffer: int = 256,
        capabilities: Sequence[str] = (),
        datasets: Mapping[str, str] | None = None,
    ) -> None:
        self._websocket = websocket
        self._buffer = buffer
        self.capabilities = tuple(capabilities)
        #: The datasets the relay serves, each with the kind of view it takes (``region``,
        #: ``sql``, ``topic``, ``path``), as its ``Welcome`` said; empty if it said nothing (a
        #: relay older than this field, or one that has no catalog from the publisher yet).
        self.datasets = {
            name: VIEW_KINDS.get(index, index) for name, index in (datasets or {}).items()
        }
        self._ids = itertools.count(1)
        self._views: dict[int, LiveView] = {}
        self._pending: dict[int, asyncio.Future[Subscribed]] = {}
        self._pending_views: dict[int, Subscribe] = {}
        self._rates: dict[int, float] = {}
        self._resumed: dict[int, LiveView] = {}
        self._publishing: dict[int, asyncio.Future[tuple[int, int]]] = {}
        self._decoder = codec.to_subscriber()
        self._reader: asyncio.Task[None] | None = None
        self.errors: list[Error] = []
        #: Why the connection can serve no more (its views ended with this error), if so.
        self.failure: SubscriptionError | None = None

    @property
    def views(self) -> list[LiveView]:
        """The views held."""
        return list(self._views.values())

    async def subscribe(
        self,
        view: View,
        dataset: str = "agents",
        rate: float = 10.0,
        priority: int = 0,
        transform: Transform | None = None,
        *,
        mode: Mode = "latest",
        resume: LiveView | None = None,
        stay: bool = False,
    ) -> LiveView:
        """Hold ``view`` of ``dataset``, pushed at most ``rate`` times a second.

        Args:
            view: what to hold.
            dataset: which dataset.
            rate: pushes per second at most.
            priority: served before lower-priority subscriptions (the relay's, across its
                connections) when the relay cannot serve them all at once; waiting ones gain
                priority as they wait, so none starves.
            transform: how the relay adapts the rows (projection, precision, relative
                coordinates); None sends them as stored.
            mode: ``latest`` (each update is the view at one tick; ticks may be coalesced) or
                ``every`` (every seq, in order, exactly once; ``rate`` does not apply).
            resume: an ``every`` view of an earlier connection (the same view of the same
                dataset): the new one starts with its rows and continues after its seq,
                first yielding the updates the old one received but had not yielded.
            stay: be served by this relay even if another is responsible for the view (no
                redirect; ``fanout.client.cluster`` sets it when it cannot follow one).

        Raises:
            SubscriptionError: the relay refused it (bad view, unknown dataset, bad
                transform, ...; code ``redirect``: another relay is responsible for it, at
                ``location``), or the connection can serve no more (``failure``).
        """
        sub = next(self._ids)
        future: asyncio.Future[Subscribed] = asyncio.get_running_loop().create_future()
        token = None
        if resume is not None:
            if (resume.dataset, resume.view, mode) != (dataset, view, "every"):
                raise ValueError("resume takes an 'every' view of the same dataset and view")
            token = resume.token() if resume.seq >= 0 else None
        request = Subscribe(sub, dataset, view, rate, priority, transform, mode, token, stay)
        if token is not None:
            self._resumed[sub] = resume  # type: ignore[assignment]
        self._pending[sub] = future
        self._pending_views[sub] = request
        self._rates[sub] = rate
        await self._send(request)
        try:
            await future
        finally:
            self._pending.pop(sub, None)
            self._pending_views.pop(sub, None)
            self._resumed.pop(sub, None)
        return self._views[sub]

    async def publish(
        self,
        dataset: str,
        rows: Sequence[Mapping[str, Any]],
        deletes: Sequence[Any] = (),
        *,
        key: str | None = None,
    ) -> tuple[int, int]:
        """Write through the relay, which forwards to the publisher: upsert ``rows`` (whole rows)
        and delete keys ``deletes`` of an ingest dataset, as ``PublisherClient.publish`` does.

        Args:
            key: the dataset's key column, which names ``deletes`` (needed with them).

        Returns:
            The ingest-log offsets (first, last) of the events, once they are durable.

        Raises:
            ValueError: deletes without ``key``, or rows whose columns differ.
            SubscriptionError: the publisher refused them, the relay could not forward them
                (``unavailable``: no publisher connection now, or it was lost meanwhile: the
                write may or may not be applied), or this connection can serve no more.
        """
        if deletes and key is None:
            raise ValueError("deletes need the dataset's key column (key=...)")
        names = list(rows[0]) if rows else []
        if any(list(row) != names for row in rows):
            raise ValueError("every row must have the same columns, in the same order")
        upserts = {name: np.asarray([row[name] for row in rows]) for name in names}
        request = Publish(
            next(self._ids),
            dataset,
            encode_columns(upserts) if upserts else Payload(),
            encode_columns({str(key): np.asarray(list(deletes))}) if deletes else Payload(),
        )
        future: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
        self._publishing[request.req] = future
        try:
            await self._send(request)
            return await future
        finally:
            self._publishing.pop(request.req, None)

    async def _send(self, frame: Subscribe | Unsubscribe | Publish) -> None:
        if self.failure is not None:
            raise self.failure
        if isinstance(frame, Subscribe):
            self._rates[frame.sub] = frame.rate
        await self._websocket.send(codec.encode(frame))

    async def _read(self) -> None:
        failure: SubscriptionError | None = None
        try:
            async for message in self._websocket:
                self._on_frame(self._decoder.decode(message))
        except ConnectionClosed as exc:
            failure = SubscriptionError("closed", f"connection to the relay closed: {exc}")
        except ProtocolError as exc:
            failure = SubscriptionError("protocol", str(exc))
            # Nobody reads this connection any more: close it, so the relay learns why.
            await self._websocket.close(CloseCode.PROTOCOL_ERROR, close_reason(str(exc)))
        failure = failure or SubscriptionError("closed", "connection to the relay closed")
        self.failure = failure
        for view in self._views.values():
            if not view._closed:
                view._end(failure)
        futures: list[asyncio.Future[Any]] = [*self._pending.values()]
        for future in [*futures, *self._publishing.values()]:
            if not future.done():
                future.set_exception(failure)

    def _on_frame(self, frame: object) -> None:
        match frame:
            case Push() | NoUpdate() if frame.sub in self._views:
                self._views[frame.sub]._apply(frame)
            case Subscribed(sub=sub) if sub in self._pending:
                request = self._pending_views[sub]
                self._views[sub] = LiveView(
                    sub,
                    request.dataset,
                    request.view,
                    frame.key,
                    frame.columns,
                    self,
                    buffer=self._buffer,
                    priority=request.priority,
                    transform=request.transform,
                    mode=request.mode,
                )
                earlier = self._resumed.get(sub)
                if earlier is not None:  # continue from its rows and seq
                    self._views[sub]._continue(earlier)
                self._pending[sub].set_result(frame)
            case Unsubscribed(sub=sub) if sub in self._views:
                self._views.pop(sub)._end(None)
            case Error(code="resync", ref=ref) if ref in self._views:
                self._views[ref].resyncs += 1  # a full push follows
            case Published(req=req, first=first, last=last) if req in self._publishing:
                self._publishing[req].set_result((first, last))
            case Error(ref=ref) if ref is not None and ref in self._publishing:
                self._publishing[ref].set_exception(SubscriptionError(frame.code, frame.message))
            case Error(ref=ref) if ref is not None and ref in self._pending:
                failure = SubscriptionError(frame.code, frame.message, frame.location)
                self._pending[ref].set_exception(failure)
            case Error(ref=ref) if ref is not None and ref in self._views:
                self._views.pop(ref)._end(SubscriptionError(frame.code, frame.message))
            case Error():
                self.errors.append(frame)
            case _:
                raise ProtocolError(f"unexpected frame from the relay: {frame!r:.200}")

    async def close(self) -> None:
        """Close the connection."""
        await self._websocket.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader


@contextlib.asynccontextmanager
async def connect(
    url: str,
    name: str = "",
    buffer: int = 256,
    capabilities: Sequence[str] = (),
    *,
    token: str = "",
    ssl: SSLContext | None = None,
) -> AsyncIterator[Subscriber]:
    """Connect to a relay, do the handshake, and yield a :class:`Subscriber`.

    ``capabilities`` declares the number formats this program decodes (``float64``,
    ``float32``, ``fixed``; empty: all); a relay sends only those (``Transform.negotiate``).
    ``token``: a JSON Web Token granting role ``subscriber``, for a relay that requires one
    (docs/security.md). ``ssl``: the TLS context for a ``wss://`` URL (default: one trusting
    the system's authorities).

    Raises:
        HandshakeRefused: the relay refused the connection; code ``unavailable``: it serves
            its most connections (another relay may have room); ``unauthorized`` or
            ``forbidden``: no valid token for it.
        OSError: the relay cannot be reached (``ConnectionError``: it broke the handshake off,
            or closed the connection before answering the ``Hello``).
    """
    secure = ssl if ssl is not None else tls.for_url(url)
    async with dial(
        url, max_size=MAX_FRAME, compression=None, open_timeout=10, ssl=secure
    ) as websocket:
        hello = Hello(
            version=PROTOCOL_VERSION,
            role="subscriber",
            name=name,
            capabilities=list(capabilities),
            token=token,
        )
        answer = await greet(websocket, codec.encode(hello), url)
        welcome = check_welcome(codec.to_subscriber().decode(answer))
        subscriber = Subscriber(websocket, buffer, capabilities, welcome.datasets)
        subscriber._reader = asyncio.create_task(subscriber._read())
        try:
            yield subscriber
        finally:
            await subscriber.close()
