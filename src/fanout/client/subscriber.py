"""The subscriber side: connect to a relay, hold views, receive their updates.

    async with connect("ws://127.0.0.1:7701") as sub:
        view = await sub.subscribe(Box((0, 0), (100, 100)), dataset="agents")
        async for update in view:
            print(update.tick, len(view.rows))

A ``LiveView`` keeps the materialised rows of its view (``view.rows``), applied from every push in
order as frames arrive, so they are exact whether or not the program iterates. Iteration yields
``Update`` notifications through a bounded buffer: if the program falls behind, the oldest
notifications are dropped (counted in ``view.dropped``) — never the rows. Transforms, priorities
and capabilities: docs/concepts.md; ``mode="every"`` and resuming with ``resume=``:
docs/delivery.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from ssl import SSLContext
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from fanout import tls
from fanout.background import Background
from fanout.client.core import (
    ClientCore,
    Ended,
    Event,
    Held,
    Moved,
    Refused,
    Updated,
    WriteRefused,
    Written,
)
from fanout.client.liveview import LiveView
from fanout.client.viewstate import Asked, SubscriptionError, Update
from fanout.connection import close_reason, dial, greet
from fanout.errors import ProtocolError
from fanout.views import View, registry
from fanout.wire import codec
from fanout.wire.handshake import check_welcome
from fanout.wire.messages import (
    PROTOCOL_VERSION,
    Error,
    Hello,
    Mode,
    Publish,
    Subscribe,
    Transform,
    Unsubscribe,
)
from fanout.wire.options import Relevance, Transduce

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
    """One connection to a relay, holding any number of views: the asyncio shell of a
    ``ClientCore``, which its reader feeds with the frames received."""

    def __init__(
        self,
        websocket: ClientConnection,
        buffer: int = 256,
        capabilities: Sequence[str] = (),
        datasets: Mapping[str, str] | None = None,
    ) -> None:
        self._websocket = websocket
        self._core = ClientCore(buffer)
        self.capabilities = tuple(capabilities)
        #: The datasets the relay serves, each with the kind of view it takes (``region``,
        #: ``sql``, ``topic``, ``path``), as its ``Welcome`` said; empty if it said nothing (a
        #: relay older than this field, or one that has no catalog from the publisher yet).
        self.datasets = {name: registry.language(index) for name, index in (datasets or {}).items()}
        self._views: dict[int, LiveView] = {}
        # Requests in flight, by sub or req: answered by the core's events.
        self._subscribing: dict[int, asyncio.Future[None]] = {}
        self._writing: dict[int, asyncio.Future[tuple[int, int]]] = {}
        self._into: dict[int, LiveView] = {}
        self._on_moved: Callable[[LiveView, str], None] | None = None
        #: The connection's tasks, held open by ``connect``'s block: its reader, and what follows
        #: its views for the caller (an ``ObjectFile``'s follower).
        self.tasks = Background()
        #: Feeds the core what arrives (``connect`` starts it in ``tasks``).
        self._reader: asyncio.Task[None] | None = None

    @property
    def views(self) -> list[LiveView]:
        """The views held."""
        return [self._views[state.sub] for state in self._core.views]

    @property
    def errors(self) -> list[Error]:
        """Errors the relay sent about no view or request of this connection."""
        return self._core.errors

    @property
    def failure(self) -> SubscriptionError | None:
        """Why the connection can serve no more (its views ended with this error), if so."""
        return self._core.failure

    @property
    def on_moved(self) -> Callable[[LiveView, str], None] | None:
        """Told when the relay ends a held view with a redirect (its part moved to the relay
        at the URL, ``fanout.client.following``): the view is handed over, not ended. None:
        such a view ends with the redirect as a ``SubscriptionError``."""
        return self._on_moved

    @on_moved.setter
    def on_moved(self, told: Callable[[LiveView, str], None] | None) -> None:
        self._on_moved = told
        self._core.follows_moves = told is not None

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
        relevance: Relevance | None = None,
        transduce: Transduce | None = None,
        confirmed: bool = False,
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
            relevance: a region view's rate tiers by distance from its focus and its priority
                from its rows (``Relevance``; docs/concepts.md, "Priority from the data").
            transduce: a transducer the relay runs over the view's pushes: the view then holds
                its output (docs/transducers.md).
            confirmed: (``latest``) only rows the publisher's stream carries; by default a write
                made through the relay is shown at once, its update ``provisional``, and
                corrected if the publisher refuses or overrides it (docs/concepts.md).

        Raises:
            SubscriptionError: the relay refused it (bad view, unknown dataset, bad
                transform, ...; code ``redirect``: another relay is responsible for it, at
                ``location``), or the connection can serve no more (``failure``).
        """
        request = self._core.subscribe(
            Asked(dataset, view, rate, priority, transform, mode, relevance, transduce, confirmed),
            resume=resume.state if resume is not None else None,
            stay=stay,
            into=into.state if into is not None else None,
        )
        answered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._subscribing[request.sub] = answered
        if into is not None:
            self._into[request.sub] = into
        try:
            await self._request(request)
            await answered
        finally:
            self._core.withdraw(request.sub)
            self._subscribing.pop(request.sub, None)
            self._into.pop(request.sub, None)
        return self._views[request.sub]

    async def publish(
        self,
        dataset: str,
        rows: Sequence[Mapping[str, Any]] | Any,
        deletes: Sequence[Any] = (),
        *,
        key: str | None = None,
    ) -> tuple[int, int]:
        """Write through the relay, which forwards to the publisher: upsert ``rows`` (whole rows:
        dicts, or a pandas DataFrame or Arrow table) and delete keys ``deletes`` of an ingest
        dataset, as ``PublisherClient.publish`` does.

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
        request = self._core.publish(dataset, rows, deletes, key)
        written: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
        self._writing[request.req] = written
        try:
            await self._request(request)
            return await written
        finally:
            self._core.withdraw(request.req)
            self._writing.pop(request.req, None)

    async def change(self, live: LiveView, view: View, rate: float | None = None) -> None:
        """Move held ``live`` to ``view`` (``LiveView.change``)."""
        await self._send(self._core.change(live.state, view, rate))

    async def unsubscribe(self, live: LiveView) -> None:
        """Stop holding ``live`` (``LiveView.close``)."""
        await self._send(self._core.unsubscribe(live.state))

    async def _send(self, frame: Subscribe | Unsubscribe | Publish) -> None:
        await self._websocket.send(codec.encode(frame))

    async def _request(self, frame: Subscribe | Publish) -> None:
        """Send a request its caller awaits the answer of; a connection that closed before
        this one's reader saw it raises what the caller is told to expect (the connection's
        ``SubscriptionError``), not websockets' ``ConnectionClosed`` (a split's moves, each a
        task of ``fanout.client.following``, would otherwise end them all)."""
        try:
            await self._send(frame)
        except ConnectionClosed as exc:
            failure = self.failure or SubscriptionError(
                "closed", f"connection to the relay closed: {exc}"
            )
            raise failure from exc

    async def _read(self) -> None:
        """Feed the core what arrives until the connection ends, then fail it (rule 4)."""
        failure: SubscriptionError | None = None
        try:
            async for message in self._websocket:
                self._handle(self._core.receive_data(message, time.time()))
        except ConnectionClosed as exc:
            failure = SubscriptionError("closed", f"connection to the relay closed: {exc}")
        except ProtocolError as exc:
            failure = SubscriptionError("protocol", str(exc))
            # Nobody reads this connection any more: close it, so the relay learns why.
            await self._websocket.close(CloseCode.PROTOCOL_ERROR, close_reason(str(exc)))
        failure = failure or SubscriptionError("closed", "connection to the relay closed")
        self._handle(self._core.fail(failure), failed=True)

    def _handle(self, events: list[Event], failed: bool = False) -> None:
        """Turn the core's events into views, wake-ups and answers."""
        for event in events:
            match event:
                case Updated(sub=sub):
                    self._views[sub].wake()
                case Held(sub=sub):
                    self._views[sub] = self._holding(sub)
                    _answer(self._subscribing.get(sub), None)
                case Refused(sub=sub, error=error):
                    _answer(self._subscribing.get(sub), error)
                case Ended(sub=sub):
                    live = self._views[sub] if failed else self._views.pop(sub)
                    live.wake()
                case Moved(sub=sub, location=location):
                    assert self._on_moved is not None  # the core follows moves only then
                    self._on_moved(self._views.pop(sub), location)
                case Written(req=req, first=first, last=last):
                    _answer(self._writing.get(req), (first, last))
                case WriteRefused(req=req, error=error):
                    _answer(self._writing.get(req), error)

    def _holding(self, sub: int) -> LiveView:
        """The view object for a subscription just held: the moved one (``into``), or new."""
        state = self._core.view(sub)
        moved = self._into.get(sub)
        if moved is None:
            return LiveView(state, self)
        moved.subscriber = self
        moved.wake()  # its state came with it: updates not yet yielded, if any
        return moved

    async def close(self) -> None:
        """Close the connection; its views end with it."""
        await self._websocket.close()
        if self._reader is not None:  # it ends once the connection closed
            await asyncio.wait([self._reader])


def _answer(future: asyncio.Future[Any] | None, result: Any) -> None:
    """Answer a request's waiter, if it still waits: with ``result``, or raise it."""
    if future is None or future.done():
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


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
        async with subscriber.tasks:
            subscriber._reader = subscriber.tasks.start(subscriber._read())
            try:
                yield subscriber
            finally:
                await subscriber.close()
