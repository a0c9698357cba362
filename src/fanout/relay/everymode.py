"""The relay's side of ``every`` mode (seed 004; ``relay.every`` holds the pure parts).

``RelayCore`` mixes this in: it records each batch's change set, serves ``every`` subscriptions
one seq at a time from the window or from what the publisher's log told (``Curious`` ->
``Knowledge``), restarts a subscription that cannot be continued with an announced ``resync``,
and tells the publisher the lowest seq its subscriptions still need (``Horizon``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import cast

import numpy as np

from fanout.errors import BadRequest, InvalidView, ProtocolError
from fanout.relay import planner
from fanout.relay.downstream import Downstream, SubKey, Subscription
from fanout.relay.every import (
    IDLE_WINDOW,
    WINDOW,
    ChangeSet,
    Cursor,
    History,
    Step,
    Steps,
    encode_step,
    rows_step,
    step,
)
from fanout.relay.ingest import DatasetState, Intake
from fanout.relay.planner import as_region
from fanout.relay.pushes import Body, Encodings, cut, cut_positions, encode_push
from fanout.relay.scheduler import Scheduler
from fanout.relay.sends import UPSTREAM, Counters, Send
from fanout.relay.state import Array, Keys
from fanout.relay.tables import Query, Result
from fanout.relay.tableviews import TableViews
from fanout.relay.transforms import InvalidTransform, Shape
from fanout.relay.upstream import Upstream
from fanout.views.entity import Entity
from fanout.views.members import SELECTING, Selecting
from fanout.views.objects import ObjectPath
from fanout.views.region import Relative
from fanout.views.sql import Sql
from fanout.views.topic import TopicFilter
from fanout.wire.columns import decode_columns, key_column
from fanout.wire.messages import (
    Curious,
    DatasetInfo,
    Error,
    Horizon,
    Knowledge,
    Subscribe,
)

#: Seqs an ``every`` subscription is sent at most per turn before others get theirs.
EVERY_BURST = 64
#: Curiosity request ids start here, apart from primitive ids (both come back as ``Error.ref``).
FIRST_CURIOSITY = 1 << 40


class EveryMode:
    """``every`` subscriptions of a relay (mixed into ``RelayCore``, whose stores it uses)."""

    datasets: dict[str, DatasetState]
    downstream: Downstream
    upstream: Upstream
    tableviews: TableViews
    encodings: Encodings
    _end: Callable[[Subscription], None]
    scheduler: Scheduler
    counters: Counters
    histories: dict[str, History]
    steps: Steps
    _curiosity: Iterator[int]
    _owed_resync: dict[SubKey, str]
    _horizons: dict[str, tuple[int, int]]  # dataset -> (epoch, seq) told upstream

    def _start_every(self) -> None:
        self.histories = {}
        self.steps = Steps()
        self._curiosity = itertools.count(FIRST_CURIOSITY)
        self._owed_resync = {}
        self._horizons = {}

    def _record(self, intake: Intake) -> None:
        """Keep the batch's change set for ``every`` subscriptions (``relay.every``)."""
        batch, state = intake.batch, intake.state
        deletes = state.table.as_keys([]) if intake.deletes is None else intake.deletes
        change = ChangeSet(
            batch.epoch,
            batch.seq,
            batch.tick,
            batch.tick_time,
            intake.upserts,
            deletes,
            pure=not batch.snapshots,
        )
        history = self.histories.setdefault(batch.dataset, History())
        reading = any(s.mode == "every" for s in self.downstream.of_dataset(batch.dataset))
        history.window = WINDOW if reading else IDLE_WINDOW
        history.record(change)

    def _distrust(self, dataset: str) -> None:
        """The relay's coverage of ``dataset`` is being rebuilt: until each ``every``
        subscription is servable again, its seqs come from the publisher's log."""
        for subscription in self.downstream.of_dataset(dataset):
            if subscription.cursor is not None:
                subscription.cursor.trusted_after = None

    def _lost(self, dataset: str, span: tuple[int, int], error: Error) -> None:
        first, last = span
        reason = (
            f"seqs {first}..{last} of {dataset!r} cannot be had from the publisher"
            f" ({error.code}: {error.message})"
        )
        for subscription in self.downstream.of_dataset(dataset):
            cursor = subscription.cursor
            if cursor is not None and first <= cursor.seq + 1 <= last:
                subscription.cursor = None
                self._owed_resync[subscription.key] = reason
                self.scheduler.wake(subscription.key)

    def on_knowledge(self, knowledge: Knowledge) -> bool:
        """A logged micro-batch's whole change, in answer to curiosity.

        Returns:
            Whether a subscription was waiting for it (pushing has work).

        Raises:
            ProtocolError: its columns do not fit the catalog.
        """
        state = self.datasets.get(knowledge.dataset)
        history = self.histories.get(knowledge.dataset)
        if state is None or history is None:
            raise ProtocolError(f"knowledge for unknown dataset {knowledge.dataset!r}")
        rows = decode_columns(knowledge.upserts)
        if knowledge.upserts.length and set(rows) != set(state.info.columns):
            raise ProtocolError(
                f"knowledge {knowledge.seq}: columns {sorted(rows)} are not"
                f" {sorted(state.info.columns)}"
            )
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
        waiting = [s.key for s in self.downstream.of_dataset(knowledge.dataset) if s.cursor]
        self.scheduler.wake_all(waiting)
        return bool(waiting)

    def _serve_every(
        self, subscription: Subscription, state: DatasetState, now: float
    ) -> list[Send]:
        """Up to ``EVERY_BURST`` seqs for an ``every`` subscription, in order (``relay.every``).

        Its first push (and the first after a ``resync``) is the full view from the active
        buffer; then one push or no-update per seq, from the live window or what the publisher's
        log told; a seq neither holds is asked for (``Curious``) and the subscription waits.
        """
        sid, buffer = subscription.key, state.buffer
        stamp = buffer.stamp
        assert stamp is not None
        history = self.histories.setdefault(subscription.dataset, History())
        sends: list[Send] = []
        cursor = subscription.cursor
        owed = self._owed_resync.pop(sid, None)
        if cursor is not None and cursor.epoch != stamp.epoch:
            owed = f"the publisher's stream changed (epoch {cursor.epoch} -> {stamp.epoch})"
            cursor = subscription.cursor = None
        if owed is not None:
            message = f"{owed}; the next push is the full view"
            sends.append(Send(subscription.client, Error("resync", message, ref=subscription.sub)))
        pushed = 0
        try:
            if cursor is None:
                body = self._full_view(subscription, state)
                subscription.cursor = Cursor(stamp.epoch, stamp.seq, body.keys, stamp.seq)
                sends.append(Send(subscription.client, encode_push(subscription.sub, stamp, body)))
                pushed = 1
            else:
                if cursor.trusted_after is None:
                    cursor.trusted_after = self._complete_after(subscription, stamp.seq)
                pushed = self._every_seqs(subscription, state.info, history, cursor, sends)
        except InvalidView as exc:  # a SQL view's query failed on the rows: it ends here
            self._end(subscription)
            return [
                *sends,
                Send(subscription.client, Error(exc.code, str(exc), ref=subscription.sub)),
            ]
        current = subscription.cursor
        assert current is not None
        waiting = any(isinstance(send.frame, Curious) for send in sends) or (
            current.seq < history.latest and pushed < EVERY_BURST and cursor is not None
        )
        if pushed:
            subscription.last_push, subscription.pushes = now, subscription.pushes + pushed
            self.scheduler.served(sid, now)
            if current.seq < history.latest and not waiting:
                self.scheduler.wake(sid)  # more is at hand: its next turn comes soon
        elif waiting:
            self.scheduler.park(sid, ("knowledge", subscription.dataset))
        else:
            self.scheduler.idle(sid)
        return sends

    def _full_view(self, subscription: Subscription, state: DatasetState) -> Body:
        """The first push of an ``every`` subscription: its whole view, from the active state.

        Raises:
            InvalidView: a SQL view's query failed on the relay's rows.
        """
        view, buffer = subscription.view, state.buffer
        if isinstance(view, Sql):
            return self.tableviews.cut(subscription, self.datasets, self.encodings)[0]
        if isinstance(view, TopicFilter | ObjectPath):
            dataset = subscription.dataset
            positions = self.tableviews.positions(
                view, state, lambda: self.downstream.views(dataset)
            )
            return cut_positions(positions, subscription.shape, None, buffer)
        return cut(as_region(view), subscription.shape, None, buffer)

    def _complete_after(self, subscription: Subscription, seq: int) -> int:
        """The seq after which this relay's batches hold every change inside the (servable)
        subscription's view: when the last ready primitive overlapping it became ready (for a
        topic, path or SQL view, the last ready primitive of its dataset: a safe bound).

        A subscription resuming on a relay that kept covering its view while it was away
        continues from the relay's window; elsewhere, older seqs come from the publisher's log.
        """
        prims = [p for p in self.upstream.of(subscription.dataset) if p.ready]
        if not isinstance(subscription.view, TopicFilter | ObjectPath | Sql):
            region = as_region(subscription.view)
            prims = [
                p
                for p in prims
                if not isinstance(p.view, Entity) and planner.overlaps(as_region(p.view), region)
            ]
        return max((p.ready_seq for p in prims), default=seq)

    def _every_seqs(
        self,
        subscription: Subscription,
        info: DatasetInfo,
        history: History,
        cursor: Cursor,
        sends: list[Send],
    ) -> int:
        """Append the seqs after ``cursor`` that are at hand to ``sends`` (and curiosity for the
        first that is not); returns how many seqs went out."""
        assert cursor.trusted_after is not None
        pushed = 0
        while pushed < EVERY_BURST and cursor.seq < history.latest:
            change = history.get(cursor.seq + 1, cursor.trusted_after)
            if change is None:
                sends.extend(self._ask(subscription.dataset, history, cursor))
                break
            found = self._step(subscription, info, change, cursor.keys)
            sends.append(Send(subscription.client, encode_step(subscription.sub, change, found)))
            cursor.seq, cursor.keys = change.seq, found.held
            pushed += 1
            if found.body is None:
                self.counters.no_updates += 1
            else:
                self.counters.pushes += 1
        return pushed

    def _step(
        self, subscription: Subscription, info: DatasetInfo, change: ChangeSet, held: Keys
    ) -> Step:
        """One seq's push for ``subscription`` (shared by identical ones: ``Steps``).

        Raises:
            InvalidView: a SQL view's query failed on the change's rows.
        """
        view, shape = subscription.view, subscription.shape
        if isinstance(view, Sql):
            infos = {name: state.info for name, state in self.datasets.items()}
            query = self.tableviews.store.prepare(view, infos)

            def compute() -> Step:
                if not change.rows:
                    return rows_step(change, _no_rows(query, held), shape, held, key=query.key)
                result = self.tableviews.store.evaluate_rows(query, change.rows)
                return rows_step(change, result, shape, held, key=query.key)

            return self.steps.get(change, view, shape, held, compute)
        selecting, index = cast(Selecting, view), tuple(info.index_columns)
        return self.steps.get(
            change,
            view,
            shape,
            held,
            lambda: step(change, selecting, shape, held, key=info.key, index=index),
        )

    def _ask(self, dataset: str, history: History, cursor: Cursor) -> list[Send]:
        """Curiosity for the seqs after ``cursor`` that are not at hand (000/004: a NACK)."""
        assert cursor.trusted_after is not None
        wanted = history.wanted(cursor.seq + 1, cursor.trusted_after)
        if wanted is None:
            return []  # asked already
        req = next(self._curiosity)
        history.asked(req, *wanted)
        return [Send(UPSTREAM, Curious(req, dataset, cursor.epoch, *wanted))]

    def _horizon_sends(self) -> list[Send]:
        """Tell the publisher the lowest seq each dataset's ``every`` subscriptions may still
        ask for, when it changed (``Horizon``: the log keeps entries from it on)."""
        sends: list[Send] = []
        for name, state in self.datasets.items():
            needed = [
                s.cursor.seq + 1
                for s in self.downstream.of_dataset(name)
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
    request: Subscribe, state: DatasetState, shape: Shape, current: Subscription | None
) -> Cursor | None:
    """The cursor an ``every`` subscription starts from (None: a full push first).

    Raises:
        InvalidView: ``resume`` without mode ``every``; an ``every`` subscription changed.
        InvalidTransform: ``relative_to`` with mode ``every``.
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
    if isinstance(request.view, Relative):
        raise InvalidView(
            "mode 'every' takes absolute views: a view relative to a moving entity is for mode"
            " 'latest'"
        )
    if not isinstance(request.view, (*SELECTING, Sql)):
        raise InvalidView(
            f"mode 'every' is served for region, topic, path and SQL views, not"
            f" {type(request.view).__name__}"
        )
    if shape.relative_to is not None:
        raise InvalidTransform(
            "mode 'every' sends rows as they changed, one seq at a time; coordinates relative"
            " to a moving entity (relative_to) are for mode 'latest'"
        )
    resume = request.resume
    if resume is None:
        return None
    key = state.info.key
    try:
        columns = decode_columns(resume.keys)
        if resume.keys.length and set(columns) != {key}:
            raise ValueError(f"it holds columns {sorted(columns)}, not only the key {key!r}")
        keys = np.unique(state.table.as_keys(columns.get(key, [])))
    except (ProtocolError, TypeError, ValueError) as exc:
        raise BadRequest(f"subscription {request.sub}: bad resume token: {exc}") from exc
    return Cursor(resume.epoch, resume.seq, keys)


def _no_rows(query: Query, held: Keys) -> Result:
    """The result of a query over no rows."""
    empty: dict[str, Array] = {name: np.empty(0) for name in query.columns}
    return Result(held[:0], np.empty(0, dtype=np.uint64), empty)
