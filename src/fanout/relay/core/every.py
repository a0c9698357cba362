"""The relay's side of ``every`` mode (US 7,487,246; ``relay.core.changesets`` holds the pure
parts).

:class:`EveryMode` records each batch's change set, serves ``every`` subscriptions one seq at a
time from the window or from what the publisher's log told (``Curious`` -> ``Knowledge``),
restarts a subscription that cannot be continued with an announced ``resync``, and tells the
publisher the lowest seq its subscriptions still need (``Horizon``). What depends on the
dataset's kind (the full view, when the window is complete for a view, one seq's step) it asks
the kind (``relay.kinds``).
"""

from __future__ import annotations

import itertools

import numpy as np

from fanout.errors import BadRequest, InvalidView, ProtocolError
from fanout.relay.core.changesets import (
    IDLE_WINDOW,
    WINDOW,
    ChangeSet,
    Cursor,
    History,
    Steps,
    encode_step,
)
from fanout.relay.core.downstream import Subscription
from fanout.relay.core.lifecycle import Lifecycle
from fanout.relay.core.sends import UPSTREAM, Counters, Send
from fanout.relay.core.transforms import Shape
from fanout.relay.data.intake import Intake, decode_rows
from fanout.relay.data.pushes import encode_push
from fanout.relay.kinds import DatasetKind, Parts
from fanout.wire.columns import decode_columns, key_column
from fanout.wire.messages import (
    Curious,
    Error,
    Horizon,
    Knowledge,
    Subscribe,
)

#: Seqs an ``every`` subscription is sent at most per turn before others get theirs (its
#: connection takes the next turn's only once it wrote them all).
EVERY_BURST = 64
#: Curiosity request ids start here, apart from primitive ids (both come back as ``Error.ref``).
FIRST_CURIOSITY = 1 << 40


class EveryMode:
    """``every`` subscriptions of a relay: their change sets, cursors, curiosity and horizons.

    Attributes:
        histories: each dataset's change sets by seq (``relay.core.changesets.History``).
        steps: recent steps, shared by equal subscriptions.
    """

    def __init__(
        self, parts: Parts, lifecycle: Lifecycle, counters: Counters, burst: int = EVERY_BURST
    ) -> None:
        """``burst``: seqs sent a subscription at most per turn."""
        self.burst = burst
        self._parts = parts
        self._lifecycle = lifecycle
        self._counters = counters
        self.histories: dict[str, History] = {}
        self.steps = Steps()
        self._curiosity = itertools.count(FIRST_CURIOSITY)
        self._horizons: dict[str, tuple[int, int]] = {}  # dataset -> (epoch, seq) told upstream
        self._below: frozenset[str] = frozenset()  # datasets relays below read in every mode

    def define(self, dataset: str) -> None:
        """A dataset is new or changed in the catalog: its history starts empty (its
        subscriptions start again: ``Lifecycle.restart``)."""
        self.histories[dataset] = History()

    def record(self, intake: Intake) -> None:
        """Keep the batch's change set for ``every`` subscriptions (``relay.core.changesets``)."""
        batch, state = intake.batch, intake.state
        deletes = state.table.as_keys([]) if intake.deletes is None else intake.deletes
        change = ChangeSet(
            batch.epoch,
            batch.seq,
            batch.tick,
            batch.tick_time,
            intake.upserts,
            deletes,
            pure=not batch.snapshots and batch.shared is None,  # shared: the changes unknown
        )
        history = self.histories.setdefault(batch.dataset, History())
        history.window = self._window(batch.dataset)
        history.record(change)

    def read_below(self, datasets: frozenset[str]) -> None:
        """The datasets relays below read in ``every`` mode (``tiers.below``): their windows
        are as wide as for ``every`` subscriptions here, so that the whole changes learnt for
        one relay below's curiosity answer the next one's (an idle window of 8 would forget a
        longer gap's first seqs as its last are learnt, and ask upstream for them again)."""
        self._below = datasets
        for name, history in self.histories.items():
            history.window = self._window(name)

    def _window(self, dataset: str) -> int:
        reading = dataset in self._below or self._parts.downstream.any_every(dataset)
        return WINDOW if reading else IDLE_WINDOW

    def upstream_lost(self) -> None:
        """The publisher connection dropped: what was asked is asked again once it is back,
        and no window is trusted until coverage is."""
        for history in self.histories.values():
            history.forget_requests()
        for name in self._parts.datasets:
            self.distrust(name)

    def upstream_connected(self) -> None:
        """A new publisher connection holds no horizons: they are told again."""
        self._horizons.clear()

    def distrust(self, dataset: str) -> None:
        """The relay's coverage of ``dataset`` is being rebuilt: until each ``every``
        subscription is servable again, its seqs come from the publisher's log."""
        for subscription in self._parts.downstream.of_dataset(dataset):
            self._lifecycle.trusted(subscription, None)

    def refused(self, error: Error) -> bool:
        """The publisher could not answer a curiosity request (``error.ref``): subscriptions
        waiting for those seqs start again (``resync``). Returns whether it was one."""
        if error.ref is None:
            return False
        for name, history in self.histories.items():
            if history.owns(error.ref):
                span = history.answered(error.ref)
                assert span is not None
                self._lost(name, span, error)
                return True
        return False

    def _lost(self, dataset: str, span: tuple[int, int], error: Error) -> None:
        first, last = span
        reason = (
            f"seqs {first}..{last} of {dataset!r} cannot be had from the publisher"
            f" ({error.code}: {error.message})"
        )
        for subscription in self._parts.downstream.of_dataset(dataset):
            cursor = subscription.cursor
            if cursor is not None and first <= cursor.seq + 1 <= last:
                self._lifecycle.restart(subscription, reason)
                self._lifecycle.scheduler.wake(subscription.key)

    def on_knowledge(self, knowledge: Knowledge) -> bool:
        """A logged micro-batch's whole change, in answer to curiosity.

        Returns:
            Whether a subscription was waiting for it (pushing has work).

        Raises:
            ProtocolError: its columns do not fit the catalog.
        """
        state = self._parts.datasets.get(knowledge.dataset)
        history = self.histories.get(knowledge.dataset)
        if state is None or history is None:
            raise ProtocolError(f"knowledge for unknown dataset {knowledge.dataset!r}")
        rows = decode_rows(state.info, knowledge.upserts, f"knowledge {knowledge.seq}")
        keys = key_column(knowledge.deletes, state.info.key, f"knowledge {knowledge.seq} deletes")
        try:
            deleted = state.table.as_keys(keys)
            if knowledge.upserts.length:
                rows[state.info.key] = state.table.as_keys(rows[state.info.key])
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"knowledge {knowledge.seq}: bad keys: {exc}") from exc
        change = ChangeSet(
            knowledge.epoch,
            knowledge.seq,
            knowledge.tick,
            knowledge.tick_time,
            rows if knowledge.upserts.length else {},
            deleted,
            whole=True,
        )
        history.learn(change)
        history.received(knowledge.req, knowledge.seq)
        subscriptions = self._parts.downstream.of_dataset(knowledge.dataset)
        waiting = [s.key for s in subscriptions if s.cursor]
        self._lifecycle.scheduler.wake_all(waiting)
        return bool(waiting)

    def serve(
        self, subscription: Subscription, kind: DatasetKind, now: float, room: int | None = None
    ) -> list[Send]:
        """Up to ``burst`` seqs (and at most ``room``, if given) for an ``every``
        subscription, in order.

        Its first push (and the first after a ``resync``) is the full view from the active
        buffer; then one push or no-update per seq, from the live window or what the publisher's
        log told; a seq neither holds is asked for (``Curious``) and the subscription waits.
        """
        lifecycle, stamp = self._lifecycle, kind.state.buffer.stamp
        assert stamp is not None
        history = self.histories.setdefault(subscription.dataset, History())
        sends: list[Send] = []
        cursor = subscription.cursor
        if cursor is not None and cursor.epoch != stamp.epoch:
            changed = f"the publisher's stream changed (epoch {cursor.epoch} -> {stamp.epoch})"
            lifecycle.restart(subscription, changed)
            cursor = None
        owed = lifecycle.announced(subscription)
        if owed is not None:
            message = f"{owed}; the next push is the full view"
            sends.append(Send(subscription.client, Error("resync", message, ref=subscription.sub)))
        pushed, burst = 0, self.burst if room is None else max(1, min(self.burst, room))
        try:
            if cursor is None:
                body = kind.full_view(subscription)
                lifecycle.placed(subscription, Cursor(stamp.epoch, stamp.seq, body.keys, stamp.seq))
                sends.append(Send(subscription.client, encode_push(subscription.sub, stamp, body)))
                pushed = 1
            else:
                if cursor.trusted_after is None:
                    after = kind.complete_after(subscription.view, stamp.seq)
                    lifecycle.trusted(subscription, after)
                pushed = self._seqs(subscription, kind, history, cursor, sends, burst=burst)
        except InvalidView as exc:  # a SQL view's query failed on the rows: it ends here
            lifecycle.end(subscription)
            return [
                *sends,
                Send(subscription.client, Error(exc.code, str(exc), ref=subscription.sub)),
            ]
        current = subscription.cursor
        assert current is not None
        waiting = any(isinstance(send.frame, Curious) for send in sends) or (
            current.seq < history.latest and pushed < burst and cursor is not None
        )
        if pushed:
            lifecycle.pushed(subscription, now, pushed)
            if current.seq < history.latest and not waiting:
                lifecycle.scheduler.wake(subscription.key)  # more is at hand: soon again
        elif waiting:
            lifecycle.asking(subscription)
        else:
            lifecycle.scheduler.idle(subscription.key)
        return sends

    def _seqs(
        self,
        subscription: Subscription,
        kind: DatasetKind,
        history: History,
        cursor: Cursor,
        sends: list[Send],
        *,
        burst: int,
    ) -> int:
        """Append up to ``burst`` of the seqs after ``cursor`` that are at hand to ``sends``
        (and curiosity for the first that is not); returns how many seqs went out."""
        assert cursor.trusted_after is not None
        pushed = 0
        while pushed < burst and cursor.seq < history.latest:
            change = history.get(cursor.seq + 1, cursor.trusted_after)
            if change is None:
                sends.extend(self._ask(subscription.dataset, history, cursor))
                break
            found = kind.step(subscription, change, cursor.keys, self.steps)
            data = encode_step(subscription.sub, change, found)
            sends.append(Send(subscription.client, data))
            rows = 0 if found.body is None else found.body.changes
            self._lifecycle.sent(subscription, len(data), rows)
            self._lifecycle.stepped(subscription, change.seq, found.held)
            pushed += 1
            if found.body is None:
                self._counters.no_updates += 1
            else:
                self._counters.pushes += 1
                self._counters.pushed_ticks.append(change.tick_time)
        return pushed

    def _ask(self, dataset: str, history: History, cursor: Cursor) -> list[Send]:
        """Curiosity for the seqs after ``cursor`` that are not at hand (US 7,487,246: a NACK)."""
        assert cursor.trusted_after is not None
        wanted = history.wanted(cursor.seq + 1, cursor.trusted_after)
        if wanted is None:
            return []  # asked already
        req = next(self._curiosity)
        history.asked(req, *wanted)
        self._counters.curiosity_asked += 1
        self._counters.curiosity_asked_seqs += wanted[1] - wanted[0] + 1
        return [Send(UPSTREAM, Curious(req, dataset, cursor.epoch, *wanted))]

    def horizons(self) -> list[Send]:
        """Tell the publisher the lowest seq each dataset's ``every`` subscriptions may still
        ask for, when it changed (``Horizon``: the log keeps entries from it on)."""
        sends: list[Send] = []
        for name, state in self._parts.datasets.items():
            needed = [
                s.cursor.seq + 1
                for s in self._parts.downstream.of_dataset(name)
                if s.cursor is not None and s.cursor.epoch == state.epoch
            ]
            want = (state.epoch, min(needed)) if needed else None
            told = self._horizons.get(name)
            if want == told:
                continue
            if told is not None and (want is None or want[0] != told[0]):
                sends.append(Send(UPSTREAM, Horizon(name, told[0], -1)))
                del self._horizons[name]
            if want is not None:
                sends.append(Send(UPSTREAM, Horizon(name, *want)))
                self._horizons[name] = want
        return sends


def every_cursor(
    request: Subscribe, kind: DatasetKind, shape: Shape, current: Subscription | None
) -> Cursor | None:
    """The cursor an ``every`` subscription starts from (None: a full push first).

    Raises:
        InvalidView: ``resume`` without mode ``every``; an ``every`` subscription changed; a
            view mode ``every`` cannot serve (``DatasetKind.check_every``).
        InvalidTransform: a transform mode ``every`` cannot apply (``relative_to``).
        BadRequest: the resume token's keys are not keys of the dataset.
    """
    if current is not None and "every" in (current.mode, request.mode):
        same = (current.dataset, current.view, current.mode, current.shape) == (
            request.dataset,
            request.view,
            request.mode,
            shape,
        )
        if not same or request.resume is not None:
            raise InvalidView(
                f"subscription {request.sub}: the dataset, view, mode and transform of an"
                " 'every' subscription cannot change (only its priority can): unsubscribe and"
                " subscribe again, with its resume token to continue where it stopped"
            )
        return current.cursor
    if request.mode != "every":
        if request.resume is not None:
            raise InvalidView("resume tokens are for mode 'every' subscriptions")
        return None
    kind.check_every(request.view, shape)
    resume = request.resume
    if resume is None:
        return None
    table = kind.state.table
    key = kind.state.info.key
    try:
        columns = decode_columns(resume.keys)
        if resume.keys.length and set(columns) != {key}:
            raise ValueError(f"it holds columns {sorted(columns)}, not only the key {key!r}")
        if isinstance(columns.get(key), np.ma.MaskedArray):
            raise ValueError(f"its key column {key!r} holds a null")
        keys = np.unique(table.as_keys(columns.get(key, [])))
    except (ProtocolError, TypeError, ValueError) as exc:
        raise BadRequest(f"subscription {request.sub}: bad resume token: {exc}") from exc
    return Cursor(resume.epoch, resume.seq, keys)
