"""Serving a round of pushes (000: [0138]-[0146], Fig. 7): ``RelayCore`` mixes this in.

Due subscriptions come from the scheduler a turn (``TURN``) at a time, highest aged priority
first. Each is triaged — gone, parked until its coverage is ready or its connection has written
everything, or to be pushed — and the turn's pushes are cut: box views of a dataset all at once
(``relay.batchcut``), other regions one by one (``relay.pushes``), SQL, topic and path views by
``relay.tableviews``, ``every`` subscriptions seq by seq (``relay.everymode``). A body is encoded
once per distinct (view, transform, held state) and shared (``pushes.Encodings``).

Two things keep a round from holding the event loop: a turn stops starting pushes other than
of boxes (those are cut together, microseconds each) once the round's ``deadline`` has passed
(the rest go back to the queue with their age; the turn's first push is always made, so every
round gets something done), and a connection whose SQL pushes (``latest`` or ``every``) have
taken more than their share of the loop has them put off (``relay.throttle.Budgets``); an
``every`` subscription catches up afterwards, seq by seq, as any slow one does.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Generator, Hashable
from typing import cast

from fanout.errors import InvalidView
from fanout.relay import planner, relative
from fanout.relay.batchcut import batchable, cut_boxes
from fanout.relay.downstream import SubKey, Subscription
from fanout.relay.everymode import EveryMode
from fanout.relay.ingest import DatasetState
from fanout.relay.keyed import KeyedState
from fanout.relay.planner import Region
from fanout.relay.pushes import Body, Held, cut, encode_push
from fanout.relay.sends import Send
from fanout.relay.state import Stamp
from fanout.relay.throttle import Budgets
from fanout.relay.transforms import EntityNotHeld, Shape
from fanout.views import covers
from fanout.views.region import Box, Relative
from fanout.views.sql import Sql
from fanout.wire.messages import Error, NoUpdate

#: Subscriptions popped and served together in one turn of a round (their box pushes are cut
#: at once, ``relay.batchcut``); a round's time budget is checked between turns' pushes.
TURN = 256


class Serving(EveryMode):
    """The pushing half of ``RelayCore`` (whose stores and counters it uses)."""

    _unsent: deque[Send]
    # Ready coverage only matters to servability: growth can only make unservable
    # subscriptions servable, shrinkage can break any.
    _grown: int
    _shrunk: int
    sql_budgets: Budgets
    end_epoch: Callable[[], list[Send]]

    def serve(
        self, now: float, idle: Callable[[int], bool], deadline: float = math.inf
    ) -> Generator[Send, None, None]:
        """The pushes due now, highest aged priority first (000: [0138]-[0146], Fig. 7).

        Ends the epoch first. Only subscriptions whose connection is ``idle`` (has written
        everything before) are served; the others are parked until ``on_writable``. Stopping
        the iteration early leaves the rest queued with their aged priorities; so does the
        ``deadline`` (``time.perf_counter``), after which no new turn starts and a turn starts
        no more pushes.
        """
        self._unsent.extend(self.end_epoch())  # acquires for relative views that moved
        self.scheduler.settle(now)
        popped: list[SubKey] = []
        try:
            while self._unsent:  # the rest of a turn a round stopped in
                yield self._unsent.popleft()
            while popped := self._pop_due():
                self._unsent.extend(self._serve_turn(popped, now, idle, deadline))
                while self._unsent:
                    yield self._unsent.popleft()
                if time.perf_counter() >= deadline:
                    return
        finally:
            for sid in popped:
                self.scheduler.requeue(sid)  # a no-op unless it was left undecided

    def pushes(self, now: float, idle: Callable[[int], bool]) -> list[Send]:
        """Every push due now (``serve`` to the end)."""
        return list(self.serve(now, idle))

    def next_wakeup(self, now: float) -> float | None:
        """When pushing has work next: ``now`` if it has now, a rate timer's time, or None."""
        if self._unsent or any(
            state.buffer.dirty and not state.busy for state in self.datasets.values()
        ):
            return now
        wakeup = self.scheduler.next_wakeup()
        return None if wakeup is None else max(wakeup, now)

    def _pop_due(self) -> list[SubKey]:
        """The next due subscriptions, at most ``TURN`` of them, highest aged priority first."""
        return cast(list[SubKey], self.scheduler.pop_many(TURN))

    def _serve_turn(
        self, sids: list[SubKey], now: float, idle: Callable[[int], bool], deadline: float
    ) -> list[Send]:
        """Serve popped subscriptions, in order; their box pushes are cut together.

        One push per connection per turn: a later subscription of a connection already served
        in this turn goes back to the queue with its age, so the next turn finds the connection
        busy and parks it (its highest-priority subscription goes first, the others get the
        state current when it can take more). Past the ``deadline`` no more pushes other than
        of boxes start (the first always does): the rest go back to the queue with their age.
        """
        served: list[list[Send]] = []
        boxes: list[tuple[int, Subscription, DatasetState, Box]] = []
        clients: set[int] = set()
        pushed = False  # a push not of a box (those are cheap, and cut together at the end)
        for at, sid in enumerate(sids):
            verdict = self._triage(sid, idle)
            if isinstance(verdict, list):
                served.append(verdict)
                continue
            subscription, state, region = verdict
            if subscription.client in clients:
                self.scheduler.requeue(sid)
                continue
            box = (
                subscription.mode != "every"
                and isinstance(region, Box)
                and batchable(region, subscription.shape)
            )
            if not box and pushed and time.perf_counter() >= deadline:
                for rest in sids[at:]:
                    self.scheduler.requeue(rest)
                break
            sql = isinstance(subscription.view, Sql)
            if sql and (until := self.sql_budgets.until(subscription.client, now)) is not None:
                self.scheduler.defer(sid, until)  # its connection spent its SQL time
                continue
            clients.add(subscription.client)
            if box:
                assert isinstance(region, Box)
                boxes.append((len(served), subscription, state, region))
                served.append([])
                continue
            pushed = True
            counters = self.tableviews.store.counters
            before = counters.seconds
            if subscription.mode == "every":
                served.append(self._serve_every(subscription, state, now))
            else:
                send = self._push(subscription, state, now, region)
                served.append([] if send is None else [send])
            if sql:  # its query's time, if one ran (not a result shared, nor table syncs)
                self.sql_budgets.spend(subscription.client, counters.seconds - before, now)
        for at, send in self._push_boxes(boxes, now):
            served[at].append(send)
        return [send for sends in served for send in sends]

    def _triage(
        self, sid: SubKey, idle: Callable[[int], bool]
    ) -> list[Send] | tuple[Subscription, DatasetState, Region | None]:
        """What to do with a popped subscription: the sends that settle it (none when it is
        parked or gone), or (subscription, state, region) when it is to be pushed."""
        subscription = self.downstream.get(sid)
        if subscription is None:
            self.scheduler.remove(sid)
            return []
        state = self.datasets.get(subscription.dataset)
        region: Region | None = None
        if state is not None and state.buffer.stamp is not None and state.info.index == "space":
            try:
                region = self._region_now(subscription, state)
            except EntityNotHeld as exc:
                return [self._fail(subscription, exc)]
            ready = region is not None
        else:
            ready = state is not None and state.buffer.stamp is not None
        if state is None or not ready or not self._is_servable(subscription, region):
            self.scheduler.park(sid, ("coverage", subscription.dataset))
            return []
        if not idle(subscription.client):
            subscription.deferred += 1
            self.scheduler.park(sid, ("client", subscription.client))
            return []
        return subscription, state, region

    def _region_now(self, subscription: Subscription, state: DatasetState) -> Region | None:
        """The absolute region to push now (a relative view resolved; None: not yet)."""
        if isinstance(subscription.view, Relative):
            return relative.region(subscription.view, state, self.upstream)
        return _region(subscription.view)

    def _fail(self, subscription: Subscription, exc: EntityNotHeld) -> Send:
        self._end(subscription)
        self.counters.ended += 1
        return Send(subscription.client, Error(exc.code, str(exc), ref=subscription.sub))

    def _is_servable(self, subscription: Subscription, region: Region | None) -> bool:
        """Whether ready primitives cover the view (``region``: a space view, resolved)."""
        seen_view, shrunk, grown = subscription.coverage_seen
        seen = subscription.view if region is None else region
        stale = seen_view != seen or shrunk != self._shrunk
        if stale or (not subscription.servable and grown != self._grown):
            subscription.servable = self._covered(subscription, region)
            subscription.coverage_seen = (seen, self._shrunk, self._grown)
        return subscription.servable

    def _covered(
        self, subscription: Subscription, region: Region | None, ready_only: bool = True
    ) -> bool:
        """Whether the primitives held (ready ones only, unless asked) cover the view."""
        dataset, view = subscription.dataset, subscription.view
        if region is None:
            return self.tableviews.covered(self.upstream, dataset, view, ready_only)
        held = self.upstream.cover(dataset, ready_only=ready_only)
        return len(held) > 0 and covers(held, region)

    def _push(
        self, subscription: Subscription, state: DatasetState, now: float, region: Region | None
    ) -> Send | None:
        if isinstance(state, KeyedState) or region is None:
            return self._push_keyed(subscription, now)
        if self._current(subscription, state):
            return None
        key = self._body_key(subscription)
        body = self.encodings.get(subscription.dataset, state.buffer.generation, key)
        if body is None:
            try:
                body = cut(region, subscription.shape, subscription.held, state.buffer)
            except EntityNotHeld as exc:
                return self._fail(subscription, exc)
            self.encodings.put(subscription.dataset, key, body)
        return self._deliver_body(subscription, state, body, now)

    def _push_boxes(
        self, boxes: list[tuple[int, Subscription, DatasetState, Box]], now: float
    ) -> list[tuple[int, Send]]:
        """``_push`` for box views (``batchcut.batchable``), their new bodies cut at once."""
        wanted: dict[tuple[str, Shape], dict[Hashable, tuple[Box, Held | None]]] = {}
        bodies: dict[tuple[str, Hashable], Body] = {}
        due = []
        for at, subscription, state, region in boxes:
            if self._current(subscription, state):
                continue
            dataset, key = subscription.dataset, self._body_key(subscription)
            due.append((at, subscription, state, key))
            if (dataset, key) in bodies:
                continue
            body = self.encodings.get(dataset, state.buffer.generation, key)
            if body is not None:
                bodies[dataset, key] = body
                continue
            wanted.setdefault((dataset, subscription.shape), {})[key] = (region, subscription.held)
        for (dataset, shape), cuts in wanted.items():
            cut_now = cut_boxes(
                [region for region, _ in cuts.values()],
                [held for _, held in cuts.values()],
                shape,
                self.datasets[dataset].buffer,
            )
            for key, body in zip(cuts, cut_now, strict=True):
                bodies[dataset, key] = body
                self.encodings.put(dataset, key, body)
        sends = []
        for at, subscription, state, key in due:
            send = self._deliver_body(subscription, state, bodies[subscription.dataset, key], now)
            if send is not None:
                sends.append((at, send))
        self.encodings.shared += len(due) - len(bodies)
        return sends

    def _current(self, subscription: Subscription, state: DatasetState) -> bool:
        """Whether the subscriber holds its view as of the active state: nothing to push."""
        held, buffer = subscription.held, state.buffer
        if (
            held is not None
            and held.generation == buffer.generation
            and held.view == subscription.view
        ):
            self.scheduler.idle(subscription.key)  # woken, but nothing is new for it
            return True
        return False

    @staticmethod
    def _body_key(subscription: Subscription) -> Hashable:
        """What a push body depends on besides the active state (``pushes.Encodings``)."""
        held = subscription.held
        return (subscription.view, subscription.shape, None if held is None else held.signature())

    def _deliver_body(
        self, subscription: Subscription, state: DatasetState, body: Body, now: float
    ) -> Send | None:
        buffer = state.buffer
        stamp = buffer.stamp
        assert stamp is not None
        after = Held(
            subscription.view, buffer.generation, stamp.epoch, stamp.seq, body.keys, body.anchor
        )
        return self._deliver(subscription, stamp, body, after, now)

    def _push_keyed(self, subscription: Subscription, now: float) -> Send | None:
        """A push of a SQL, topic or path view (``relay.tableviews``)."""
        dataset = subscription.dataset
        if self.tableviews.current(subscription, self.datasets):
            self.scheduler.idle(subscription.key)  # woken, but nothing is new for it
            return None
        try:
            body, after = self.tableviews.cut(
                subscription, self.datasets, self.encodings, lambda: self.downstream.views(dataset)
            )
        except InvalidView as exc:  # the query failed on the current rows
            self._end(subscription)
            return Send(subscription.client, Error(exc.code, str(exc), ref=subscription.sub))
        stamp = self.datasets[dataset].buffer.stamp
        assert stamp is not None
        return self._deliver(subscription, stamp, body, after, now)

    def _deliver(
        self, subscription: Subscription, stamp: Stamp, body: Body, after: Held, now: float
    ) -> Send | None:
        """Record what the subscriber holds after ``body``; the push, no-update, or nothing."""
        held, sid = subscription.held, subscription.key
        advanced = held is None or (held.epoch, held.seq) != (stamp.epoch, stamp.seq)
        if held is not None and held.epoch == stamp.epoch:
            subscription.coalesced += max(0, stamp.seq - held.seq - 1)
        subscription.held = after
        if not (body.full or body.changes or advanced):
            self.scheduler.idle(sid)  # a new state, but neither a new tick nor a change
            return None
        self.scheduler.served(sid, now)
        subscription.last_push = now
        subscription.pushes += 1
        if not (body.full or body.changes):
            self.counters.no_updates += 1
            return Send(
                subscription.client,
                NoUpdate(subscription.sub, stamp.epoch, stamp.seq, stamp.tick),
            )
        self.counters.pushes += 1
        return Send(subscription.client, encode_push(subscription.sub, stamp, body))


_region = planner.as_region
