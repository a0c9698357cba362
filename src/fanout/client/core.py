"""The subscriber's side of one relay connection, with no I/O: frames in, events and frames out.

:class:`ClientCore` owns the state of the connection's subscriptions (``ViewState``), its requests
in flight and its failure. Its caller (the asyncio shell, ``fanout.client.subscriber``) moves the
bytes, owns the clock (``now`` is wall-clock time) and turns events into wake-ups and answers.

1. A request is a frame returned to the caller to send; once the connection failed every
   request raises its failure.
2. Frames are handled in the order they arrive; one the core cannot place (an answer to no
   request, a push for no subscription) is a ``ProtocolError``: the connection is broken.
3. A held view ended by a redirect is handed over (``Moved``) if ``follows_moves``, and is no
   longer this core's; otherwise it ends with the redirect as its error.
4. A connection that fails ends every held view with its failure (they stay listed), refuses
   every request in flight.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fanout.client.viewstate import Asked, SubscriptionError, Update, ViewState
from fanout.errors import ProtocolError
from fanout.views import View
from fanout.wire import codec
from fanout.wire.columns import Columns as Payload
from fanout.wire.columns import encode_columns, from_values
from fanout.wire.messages import (
    Error,
    NoUpdate,
    Publish,
    Published,
    Push,
    Subscribe,
    Subscribed,
    Unsubscribe,
    Unsubscribed,
)
from fanout.wire.tables import table_columns


@dataclass(frozen=True)
class Held:
    """Subscription ``sub`` was accepted: ``ClientCore.view(sub)`` is its state."""

    sub: int


@dataclass(frozen=True)
class Refused:
    """Subscription request ``sub`` was refused, or the connection failed first."""

    sub: int
    error: SubscriptionError


@dataclass(frozen=True)
class Updated:
    """A push or no-update was applied to ``sub``'s state (``update`` is pending in it)."""

    sub: int
    update: Update


@dataclass(frozen=True)
class Ended:
    """Held view ``sub`` ended (``state.error`` says why; None: unsubscribed)."""

    sub: int
    state: ViewState


@dataclass(frozen=True)
class Moved:
    """Held view ``sub``'s part moved to the relay at ``location`` (rule 3): hand it over."""

    sub: int
    state: ViewState
    location: str


@dataclass(frozen=True)
class Written:
    """Write request ``req`` is durable at ingest-log offsets ``first``..``last``."""

    req: int
    first: int
    last: int


@dataclass(frozen=True)
class WriteRefused:
    """Write request ``req`` was refused, or the connection failed first."""

    req: int
    error: SubscriptionError


Event = Held | Refused | Updated | Ended | Moved | Written | WriteRefused


@dataclass(frozen=True)
class _Asking:
    """A subscription request in flight."""

    asked: Asked
    resume: ViewState | None  # an earlier view to continue from
    into: ViewState | None  # a view moved here from another connection


class ClientCore:
    """One connection's subscriptions and requests (rules 1-4)."""

    def __init__(self, buffer: int = 256) -> None:
        """``buffer``: updates not yet yielded a ``latest`` view keeps (``ViewState.buffer``)."""
        self.buffer = buffer
        #: Why the connection can serve no more (its views ended with this error), if so.
        self.failure: SubscriptionError | None = None
        #: Errors the relay sent about nothing this core holds or asked.
        self.errors: list[Error] = []
        #: Whether a held view ended by a redirect is handed over (rule 3).
        self.follows_moves = False
        self._ids = itertools.count(1)
        self._views: dict[int, ViewState] = {}
        self._asking: dict[int, _Asking] = {}
        self._writing: set[int] = set()
        self._decoder = codec.to_subscriber()

    @property
    def views(self) -> list[ViewState]:
        """The views held (and, once the connection failed, those it ended)."""
        return list(self._views.values())

    def view(self, sub: int) -> ViewState:
        """The state of held view ``sub``.

        Raises:
            KeyError: none is held under ``sub``.
        """
        return self._views[sub]

    # -- requests (rule 1) --------------------------------------------------------------------

    def subscribe(
        self,
        asked: Asked,
        *,
        resume: ViewState | None = None,
        stay: bool = False,
        into: ViewState | None = None,
    ) -> Subscribe:
        """The request to hold ``asked``; answered by ``Held`` or ``Refused`` with its ``sub``.

        Args:
            resume: an ``every`` view of an earlier connection to continue from.
            stay: be served by this relay even if another is responsible.
            into: a view moved from another connection: held here as the same state.

        Raises:
            ValueError: ``resume`` is not an ``every`` view of the same dataset and view.
            SubscriptionError: the connection failed.
        """
        token = None
        if resume is not None:
            if (resume.asked.dataset, resume.asked.view, asked.mode) != (
                asked.dataset,
                asked.view,
                "every",
            ):
                raise ValueError("resume takes an 'every' view of the same dataset and view")
            token = resume.token() if resume.seq >= 0 else None
        self._check()
        sub = next(self._ids)
        earlier = resume if into is None and token is not None else None
        self._asking[sub] = _Asking(asked, earlier, into)
        return Subscribe(
            sub,
            asked.dataset,
            asked.view,
            asked.rate,
            asked.priority,
            asked.transform,
            asked.mode,
            token,
            stay,
            relevance=asked.relevance,
            transduce=asked.transduce,
            confirmed=asked.confirmed,
        )

    def change(self, state: ViewState, view: View, rate: float | None = None) -> Subscribe:
        """The request moving held ``state`` to ``view`` (and ``rate``, if given).

        Raises:
            SubscriptionError: the connection failed.
        """
        self._check()
        asked = state.asked
        state.asked = replace(asked, view=view, rate=rate or asked.rate)
        return Subscribe(
            state.sub,
            asked.dataset,
            view,
            state.asked.rate,
            asked.priority,
            asked.transform,
            mode=asked.mode,  # left out, it would be ``latest``: an ``every`` view would change
            relevance=asked.relevance,  # left out, its tiers would end
            transduce=asked.transduce,  # left out, the relay would refuse the change
            confirmed=asked.confirmed,  # left out, writes not confirmed would be shown
        )

    def unsubscribe(self, state: ViewState) -> Unsubscribe:
        """The request ending held ``state``; ``Ended`` follows once the relay confirms.

        Raises:
            SubscriptionError: the connection failed.
        """
        self._check()
        return Unsubscribe(state.sub)

    def publish(
        self,
        dataset: str,
        rows: Sequence[Mapping[str, Any]] | Any,
        deletes: Sequence[Any] = (),
        key: str | None = None,
    ) -> Publish:
        """The request writing ``rows`` (dicts, or a pandas DataFrame or Arrow table, its missing
        values NULL: ``wire.tables``) and deleting keys ``deletes`` of ingest dataset
        ``dataset``; answered by ``Written`` or ``WriteRefused`` with its ``req``.

        Raises:
            ValueError: deletes without ``key``, or rows whose columns differ.
            SubscriptionError: the connection failed.
        """
        if deletes and key is None:
            raise ValueError("deletes need the dataset's key column (key=...)")
        upserts = table_columns(rows)
        if upserts is None:
            names = list(rows[0]) if rows else []
            if any(list(row) != names for row in rows):
                raise ValueError("every row must have the same columns, in the same order")
            upserts = {name: from_values([row[name] for row in rows]) for name in names}
        request = Publish(
            next(self._ids),
            dataset,
            encode_columns(upserts) if upserts else Payload(),
            encode_columns({str(key): np.asarray(list(deletes))}) if deletes else Payload(),
        )
        self._check()
        self._writing.add(request.req)
        return request

    def withdraw(self, ref: int) -> None:
        """Forget request ``ref``: its asker stopped waiting (an answer to it is then a
        ``ProtocolError``, rule 2)."""
        self._asking.pop(ref, None)
        self._writing.discard(ref)

    def _check(self) -> None:
        if self.failure is not None:
            raise self.failure

    # -- what arrives (rules 2-4) -------------------------------------------------------------

    def receive_data(self, data: bytes | str, now: float) -> list[Event]:
        """Decode and handle one frame from the relay, received at wall-clock time ``now``.

        Raises:
            ProtocolError: it does not decode or cannot be placed (rule 2).
        """
        return self.receive(self._decoder.decode(data), now)

    def receive(self, frame: object, now: float) -> list[Event]:
        """Handle one decoded frame from the relay, received at wall-clock time ``now``.

        Raises:
            ProtocolError: it cannot be placed (rule 2), or a push does not decode.
        """
        events: list[Event] = []
        match frame:
            case Push() | NoUpdate() if frame.sub in self._views:
                events.append(Updated(frame.sub, self._views[frame.sub].apply(frame, now)))
            case Subscribed(sub=sub) if sub in self._asking:
                self._views[sub] = self._held(frame)
                events.append(Held(sub))
            case Unsubscribed(sub=sub) if sub in self._views:
                events.append(self._end(sub, None))
            case Error(code="resync", ref=ref) if ref in self._views:
                self._views[ref].resyncs += 1  # a full push follows
            case Published(req=req, first=first, last=last) if req in self._writing:
                self._writing.discard(req)
                events.append(Written(req, first, last))
            case Error(ref=ref) if ref is not None and ref in self._writing:
                self._writing.discard(ref)
                events.append(WriteRefused(ref, SubscriptionError(frame.code, frame.message)))
            case Error(ref=ref) if ref is not None and ref in self._asking:
                del self._asking[ref]
                error = SubscriptionError(frame.code, frame.message, frame.location)
                events.append(Refused(ref, error))
            case Error(code="redirect", ref=ref, location=str(location)) if (
                ref in self._views and self.follows_moves
            ):
                events.append(Moved(ref, self._views.pop(ref), location))
            case Error(ref=ref) if ref is not None and ref in self._views:
                error = SubscriptionError(frame.code, frame.message, frame.location)
                events.append(self._end(ref, error))
            case Error():
                self.errors.append(frame)
            case _:
                raise ProtocolError(f"unexpected frame from the relay: {frame!r:.200}")
        return events

    def fail(self, failure: SubscriptionError) -> list[Event]:
        """The connection can serve no more (rule 4)."""
        self.failure = failure
        events: list[Event] = []
        for sub, state in self._views.items():
            if not state.ended:
                state.end(failure)
                events.append(Ended(sub, state))
        events += [Refused(sub, failure) for sub in self._asking]
        events += [WriteRefused(req, failure) for req in self._writing]
        self._asking.clear()
        self._writing.clear()
        return events

    def _end(self, sub: int, error: SubscriptionError | None) -> Ended:
        state = self._views.pop(sub)
        state.end(error)
        return Ended(sub, state)

    def _held(self, subscribed: Subscribed) -> ViewState:
        """The state a ``Subscribed`` answer starts holding: a new one, one continuing a
        resumed view's rows and seq, or one moved here from another connection (``into``: a
        ``latest`` view's next push is full and replaces its rows, an ``every`` view's
        continues after its seq)."""
        asking = self._asking.pop(subscribed.sub)
        moved = asking.into
        if moved is not None:
            moved.sub, moved.key, moved.columns = subscribed.sub, subscribed.key, subscribed.columns
            moved.moves += 1
            return moved
        state = ViewState(
            subscribed.sub, asking.asked, subscribed.key, subscribed.columns, self.buffer
        )
        if asking.resume is not None:
            state.take_over(asking.resume)
        return state
