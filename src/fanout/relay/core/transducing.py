"""Where the relay's core hands transduced subscriptions to their transducers
(``fanout.transducers``; CA 3197003 [0128]).

A subscription with ``transduce`` is served as any other: cut, transformed, encoded. Its frames
then pass here on their way out of a round: each push or no-update of it is decoded and stepped
through its session, whose output frame goes out instead. Only connections holding a transduced
subscription have their frames looked at; the others pass untouched. A session that fails or
goes over its budget sends ``Error{code: "transducer_stopped"}`` and its subscription ends;
nothing else on the relay notices.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator

import msgspec

from fanout.relay.core.downstream import SubKey, Subscription
from fanout.relay.core.lifecycle import Lifecycle
from fanout.relay.core.sends import Send
from fanout.relay.core.serving import Serving
from fanout.relay.core.throttle import Budgets
from fanout.relay.kinds import Accepted, DatasetKind
from fanout.transducers import (
    InvalidTransducer,
    OverBudget,
    Session,
    Transducers,
    TransducerStopped,
)
from fanout.transducers.window import view_schema
from fanout.wire.messages import Error, Frame, NoUpdate, Push, Subscribe, Subscribed
from fanout.wire.options import Transduce


class Transducing:
    """The relay's transduced subscriptions and their sessions (see the module)."""

    def __init__(
        self, transducers: Transducers | None, lifecycle: Lifecycle, serving: Serving
    ) -> None:
        self.transducers = transducers or Transducers()
        self._lifecycle = lifecycle
        self._serving = serving
        self._sessions: dict[SubKey, tuple[Transduce, Session]] = {}
        self._clients: Counter[int] = Counter()  # client -> its transduced subscriptions
        budget = self.transducers.budget
        self._shares = Budgets(budget.share, budget.burst)  # each connection's loop time
        self.stopped = 0

    def accept(
        self,
        key: SubKey,
        request: Subscribe,
        kind: DatasetKind,
        accepted: Accepted,
        current: Subscription | None,
    ) -> Subscribed:
        """Subscription ``key`` is new (``current`` None) or changed: start its session if it
        names a transducer; returns its ``Subscribed`` (the output's key and columns, or the
        view's).

        Raises:
            InvalidTransducer: no such transducer, it refuses its parameters or the view, or a
                subscription that goes on would change its transducer.
        """
        spec = request.transduce
        held = self._sessions.get(key)
        if current is not None:
            if spec != (None if held is None else held[0]):
                raise InvalidTransducer(
                    f"subscription {request.sub}: its transducer cannot change; unsubscribe and"
                    " subscribe again"
                )
            return Subscribed(key[1], accepted.key, accepted.columns)  # not sent: it goes on
        self.end(key)
        if spec is None:
            return Subscribed(key[1], accepted.key, accepted.columns)
        if request.resume is not None:
            raise InvalidTransducer(
                f"subscription {request.sub}: a transduced subscription does not resume (its"
                " window was at the relay it left): subscribe again without resume"
            )
        types = kind.state.info.columns
        schema = view_schema(accepted.columns, types, accepted.shape.precision)
        session = self.transducers.start(spec, schema)
        self._sessions[key] = (spec, session)
        self._clients[key[0]] += 1
        return Subscribed(key[1], session.key, session.columns)

    def __len__(self) -> int:
        """Subscriptions with a session."""
        return len(self._sessions)

    def transduced(self, key: SubKey) -> bool:
        """Whether subscription ``key`` has a session."""
        return key in self._sessions

    def end(self, key: SubKey) -> None:
        """Subscription ``key`` ended (or is no longer transduced): its session goes."""
        if self._sessions.pop(key, None) is not None:
            self._clients[key[0]] -= 1
            if not self._clients[key[0]]:
                del self._clients[key[0]]

    def end_client(self, client: int) -> None:
        """A connection closed: its sessions go."""
        for key in [key for key in self._sessions if key[0] == client]:
            self.end(key)
        self._shares.forget(client)

    def through(
        self, sends: Generator[Send, None, None], now: float
    ) -> Generator[Send, None, None]:
        """``sends`` (of a round at ``now``), with each frame of a transduced subscription
        replaced by its session's output; a subscription whose session failed, or whose
        connection's transducers took more than their share of the loop, ends after its error."""
        try:
            yield from self._through(sends, now)
        finally:
            sends.close()  # what the round popped and did not serve goes back to the queue

    def _through(
        self, sends: Generator[Send, None, None], now: float
    ) -> Generator[Send, None, None]:
        for send in sends:
            if send.to not in self._clients:
                yield send
                continue
            key = (send.to, _addressed(send))
            held = self._sessions.get(key)
            frame = send.message() if held is not None else None
            if held is None or not isinstance(frame, Push | NoUpdate):
                yield send
                continue
            try:
                output = self._step(send.to, held[1], frame, now)
            except TransducerStopped as exc:
                self.stopped += 1
                self.stop(key)
                message = f"the transducer was stopped: {exc}"
                yield Send(send.to, Error(exc.code, message, ref=key[1]))
                continue
            yield Send(send.to, output)

    def _step(self, client: int, session: Session, frame: Push | NoUpdate, now: float) -> Frame:
        """``session``'s output for ``frame``, its time charged to its connection's share.

        Raises:
            TransducerStopped: it failed, or went over its budget or its connection's share.
        """
        if self._shares.until(client, now) is not None:
            budget = self.transducers.budget
            raise OverBudget(
                f"the transducers of this connection took more than their share of the relay's"
                f" loop, {budget.share:g} s a second after a first {budget.burst:g} s"
            )
        try:
            return session.step(frame)
        finally:
            self._shares.spend(client, session.spent, now)

    def stop(self, key: SubKey) -> None:
        """End subscription ``key`` and its session: nothing more of it goes out (not even
        what a stopped round left to send)."""
        self.end(key)
        subscription = self._lifecycle.downstream.get(key)
        if subscription is not None:
            self._lifecycle.end(subscription)
        self._serving.forget(key)


class _Header(msgspec.Struct):
    """A pushed frame's type and subscription, read without its rows."""

    type: str = ""
    sub: int = -1


_header = msgspec.msgpack.Decoder(_Header)


def _addressed(send: Send) -> int:
    """The subscription an encoded push or no-update is for (-1: another frame), its rows
    skipped: a transduced subscription's connection has its other pushes looked at too."""
    frame = send.frame
    if isinstance(frame, bytes):
        header = _header.decode(frame)
        return header.sub if header.type in ("push", "no_update") else -1
    return frame.sub if isinstance(frame, Push | NoUpdate) else -1
