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
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from ssl import SSLContext
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from fanout import tls
from fanout.client.liveview import LiveView, SubscriptionError, Update
from fanout.connection import close_reason, dial, greet
from fanout.errors import ProtocolError
from fanout.views import View, registry
from fanout.wire import codec
from fanout.wire.columns import Columns as Payload
from fanout.wire.columns import encode_columns
from fanout.wire.handshake import check_welcome
from fanout.wire.messages import (
    PROTOCOL_VERSION,
    Error,
    Hello,
    Mode,
    NoUpdate,
    Publish,
    Published,
    Push,
    Subscribe,
    Subscribed,
    Transform,
    Unsubscribe,
    Unsubscribed,
)

__all__ = [
    "MAX_FRAME",
    "LiveView",
    "Subscriber",
    "SubscriptionError",
    "Update",
    "connect",
]


#: Largest frame accepted from a relay (a first push of a large view).
MAX_FRAME = 256 << 20


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
        self.datasets = {name: registry.language(index) for name, index in (datasets or {}).items()}
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
        #: Told when the relay ends a held view with a redirect (its part moved to the relay
        #: at the URL, ``fanout.client.following``): the view is handed over, not ended. None:
        #: such a view ends with the redirect as a ``SubscriptionError``.
        self.on_moved: Callable[[LiveView, str], None] | None = None
        self._into: dict[int, LiveView] = {}

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
        into: LiveView | None = None,
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
                redirect; ``fanout.client.following`` sets it when it cannot follow one).
            into: a view another connection held (``fanout.client.following``, when its part
                moved): that same object is held here from now on, keeping its rows, updates
                not yet yielded and iteration (with ``resume=into`` for an ``every`` view).

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
        if into is not None:
            self._into[sub] = into
        elif token is not None:
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
            self._into.pop(sub, None)
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
                self._views[sub] = self._held(frame)
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
            case Error(code="redirect", ref=ref, location=str(location)) if (
                ref in self._views and self.on_moved is not None
            ):
                self.on_moved(self._views.pop(ref), location)
            case Error(ref=ref) if ref is not None and ref in self._views:
                self._views.pop(ref)._end(
                    SubscriptionError(frame.code, frame.message, frame.location)
                )
            case Error():
                self.errors.append(frame)
            case _:
                raise ProtocolError(f"unexpected frame from the relay: {frame!r:.200}")

    def _held(self, subscribed: Subscribed) -> LiveView:
        """The view a ``Subscribed`` answer starts holding: a new one, one continuing a
        resumed view's rows and seq, or one moved here from another connection (``into``)."""
        sub = subscribed.sub
        moved = self._into.pop(sub, None)
        if moved is not None:
            return moved._moved_to(self, sub, subscribed)
        request = self._pending_views[sub]
        view = LiveView(
            sub,
            request.dataset,
            request.view,
            subscribed.key,
            subscribed.columns,
            self,
            buffer=self._buffer,
            priority=request.priority,
            transform=request.transform,
            mode=request.mode,
        )
        earlier = self._resumed.get(sub)
        if earlier is not None:  # continue from its rows and seq
            view._continue(earlier)
        return view

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
