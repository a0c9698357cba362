"""Serving a round of pushes (CA 3197003 [0138]-[0146], Fig. 7), sans I/O.

Due subscriptions come from the scheduler a turn (``TURN``) at a time, highest aged priority
first. Each is triaged — gone, waiting until its coverage is ready or its connection has written
everything, put off, or to be pushed (``relay.core.lifecycle``) — and the turn's pushes are cut by
the dataset's kind (``relay.kinds``): pushes a kind calls cheap (box views) all at once at the end
of the turn, the others one by one, ``every`` subscriptions seq by seq (``relay.core.every``). A
body is encoded once per distinct (view, transform, held state) and shared (``pushes.Encodings``).

Two things keep a round from holding the event loop, both measured by the caller: a turn stops
starting pushes other than cheap ones once the round is ``out_of_time`` (the rest go back to
the queue with their age; the turn's first push is always made, so every round gets something
done), and a connection whose metered pushes (SQL, ``latest`` or ``every``) have taken more than
their share of the loop has them put off (``relay.core.throttle.Budgets``). A ``latest`` push
to a fitted link (``relay.core.links``) is cut alone at its detail: whole, creations alone, or off.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Hashable
from typing import cast

from fanout.errors import InvalidView
from fanout.relay.core import tiering
from fanout.relay.core.downstream import SubKey, Subscription
from fanout.relay.core.every import EveryMode
from fanout.relay.core.lifecycle import Lifecycle
from fanout.relay.core.links import Fit, Links
from fanout.relay.core.livepath import LivePath
from fanout.relay.core.planner import as_region
from fanout.relay.core.sends import Counters, Send
from fanout.relay.core.throttle import Budgets
from fanout.relay.core.transforms import EntityNotHeld
from fanout.relay.data.buffers import Stamp
from fanout.relay.data.pushes import Held, encode_push
from fanout.relay.kinds import Cut, DatasetKind, Parts
from fanout.wire.messages import Error, NoUpdate

#: Subscriptions popped and served together in one turn of a round (their cheap pushes are cut
#: at once, ``relay.data.batchcut``); a round's time budget is checked between turns' pushes.
TURN = 256


def never() -> bool:
    """A round with no time budget: never out of time."""
    return False


class Serving:
    """Rounds of pushes over the relay's stores (``Parts``), one turn at a time.

    Attributes:
        budgets: each connection's share of the loop for metered (SQL) pushes.
        links: each connection's link, and the pushes fitted to it.
    """

    def __init__(
        self,
        parts: Parts,
        lifecycle: Lifecycle,
        every: EveryMode,
        budgets: Budgets,
        counters: Counters,
    ) -> None:
        self._parts = parts
        self._downstream = parts.downstream
        self._kinds = parts.kinds
        self._lifecycle = lifecycle
        self._scheduler = lifecycle.scheduler
        self._every = every
        self.budgets = budgets
        self.links = Links()
        #: Writes made through this relay, shown at once (``relay.core.livepath``).
        self.live = LivePath(parts)
        self._counters = counters
        # A turn can be several frames (``every`` mode); what a stopped round did not yield of
        # it goes out first in the next round, so nothing decided is lost — unless its
        # subscription ends meanwhile (``forget``): nothing of it follows its end. Each frame
        # with the subscription it is for (None: the round's ``first``).
        self._unsent: deque[tuple[SubKey | None, Send]] = deque()
        self._forgotten: set[SubKey] = set()  # ended while frames of theirs were unsent

    def serve(
        self,
        now: float,
        idle: Callable[[int], bool],
        out_of_time: Callable[[], bool] = never,
        first: list[Send] | None = None,
    ) -> Generator[Send, None, None]:
        """The pushes due now, highest aged priority first (CA 3197003 [0138]-[0146]).

        ``first`` goes out before them. Only subscriptions whose connection is ``idle`` (has
        written everything before) are served; the others wait until it is writable. Stopping
        the iteration early leaves the rest queued with their aged priorities; so does
        ``out_of_time()`` turning true: no new turn starts, and a turn starts no more pushes
        other than cheap ones.
        """
        self._unsent.extend((None, send) for send in first or ())
        if self.links.refined:  # rows they hold at coarser detail go again (``_fitted``)
            for client in self.links.take_refined():
                coarse = (s.key for s in self._downstream.of_client(client) if s.coarse)
                self._scheduler.wake_all(coarse)
        self._derive()
        self._scheduler.settle(now)
        popped: list[SubKey] = []
        try:
            yield from self._drain()  # the rest of a turn a round stopped in
            while popped := cast(list[SubKey], self._scheduler.pop_many(TURN)):
                self._unsent.extend(self._serve_turn(popped, now, idle, out_of_time))
                yield from self._drain()
                if out_of_time():
                    return
        finally:
            for sid in popped:
                self._scheduler.requeue(sid)  # a no-op unless it was left undecided

    def _derive(self) -> None:
        """Give the subscriptions just woken whose priority derives from their rows that
        priority, before the scheduler sorts them (``relay.core.tiering`` rule 5)."""
        derived = self._downstream.derived
        if not derived:
            return
        for sid in self._scheduler.fresh(derived.keys()):
            subscription = derived.get(cast(SubKey, sid))
            kind = None if subscription is None else self._kinds.get(subscription.dataset)
            if subscription is None or kind is None or kind.state.buffer.stamp is None:
                continue
            try:
                located = kind.locate(subscription)
            except EntityNotHeld:
                continue  # its triage ends it
            if located is not None:
                found = tiering.priority(subscription, as_region(located), kind.state)
                self._scheduler.reprioritise(sid, found)

    def has_unsent(self) -> bool:
        """Whether a stopped round left frames to send."""
        return bool(self._unsent)

    def forget(self, key: SubKey) -> None:
        """Drop what a stopped round left to send to subscription ``key``, which ended (its
        subscriber would get frames for a subscription it no longer has), and its link demand."""
        self.links.forget(*key)
        self.live.forget(key)
        if self._unsent:
            self._forgotten.add(key)

    def _drain(self) -> Generator[Send, None, None]:
        """The unsent frames, in order, but those of subscriptions that ended meanwhile."""
        unsent, forgotten = self._unsent, self._forgotten
        while unsent:
            key, send = unsent.popleft()
            if key is None or key not in forgotten:
                yield send
        forgotten.clear()  # new turns are of subscriptions as they are now

    def _serve_turn(
        self,
        sids: list[SubKey],
        now: float,
        idle: Callable[[int], bool],
        out_of_time: Callable[[], bool],
    ) -> list[tuple[SubKey | None, Send]]:
        """Serve popped subscriptions, in order; cheap pushes are cut together at the end.
        Each frame comes with the subscription it is for.

        One push per connection per turn: a later subscription of a connection already served
        in this turn goes back to the queue with its age, so the next turn finds the connection
        busy and parks it (its highest-priority subscription goes first, the others get the
        state current when it can take more). ``every`` subscriptions, whose seqs cannot be
        coalesced, share one: a connection served only ``every`` seqs in this turn takes more
        while they come to fewer than an ``every`` burst (each waiting its turn would cost a
        round per subscription: a thousand views moved to a relay on a few connections). Out of
        time, no more pushes other than cheap ones start (the first always does): the rest go
        back to the queue with their age.
        """
        served: list[list[Send]] = []
        keys: list[SubKey] = []  # whose each list of ``served`` is
        together: dict[DatasetKind, list[tuple[int, Subscription, Hashable]]] = {}
        clients: set[int] = set()
        room: dict[int, int] = {}  # client -> frames its ``every`` seqs may still take
        pushed = False  # a push not cut together (those are cheap)
        for at, sid in enumerate(sids):
            verdict = self._triage(sid, idle)
            if isinstance(verdict, list):
                served.append(verdict)
                keys.append(sid)
                continue
            subscription, kind, located = verdict
            client = subscription.client
            if client in clients and (subscription.mode != "every" or room.get(client, 0) <= 0):
                self._scheduler.requeue(sid)
                continue
            fitted = self._fitted(subscription, now)
            if fitted is None:  # put off: its link has taken all it may for now
                continue
            cheap = (
                not fitted and subscription.mode != "every" and kind.batched(subscription, located)
            )
            if not cheap and pushed and out_of_time():
                for rest in sids[at:]:
                    self._scheduler.requeue(rest)
                break
            until = self.budgets.until(subscription.client, now) if kind.metered else None
            if until is not None:
                self._lifecycle.over_budget(subscription, until)
                continue
            clients.add(subscription.client)
            keys.append(sid)
            if cheap:
                together.setdefault(kind, []).append((len(served), subscription, located))
                served.append([])
                continue
            pushed = True
            before = kind.query_seconds()
            if subscription.mode == "every":
                left = room.get(client, self._every.burst)
                sends = self._every.serve(subscription, kind, now, left)
                served.append(sends)
                room[client] = left - sum(send.to == client for send in sends)
            else:
                served.append(self._push(subscription, kind, located, now, fitted))
                room[client] = 0
            if kind.metered:  # its query's time, if one ran (not a result shared, nor syncs)
                self.budgets.spend(subscription.client, kind.query_seconds() - before, now)
        self._push_together(together, served, now)
        return [(key, send) for key, sends in zip(keys, served, strict=True) for send in sends]

    def _push_together(
        self,
        together: dict[DatasetKind, list[tuple[int, Subscription, Hashable]]],
        served: list[list[Send]],
        now: float,
    ) -> None:
        """Cut each kind's cheap pushes of the turn at once; each goes in its place in
        ``served``. Quiet views (``DatasetKind.quiet``) are not cut: their no-updates are made
        together (``_unchanged``)."""
        for kind, turn in together.items():
            stamp = kind.state.buffer.stamp
            assert stamp is not None
            quiet = kind.quiet([(s, located) for _, s, located in turn])
            due = turn
            if any(quiet):
                self._unchanged(
                    kind, [d for d, q in zip(turn, quiet, strict=True) if q], served, now
                )
                due = [d for d, q in zip(turn, quiet, strict=True) if not q]
            cuts = kind.cut_together([(s, located) for _, s, located in due])
            self._deliver_together(due, cuts, stamp, served, now)

    def _deliver_together(
        self,
        due: list[tuple[int, Subscription, Hashable]],
        cuts: list[Cut | None],
        stamp: Stamp,
        served: list[list[Send]],
        now: float,
    ) -> None:
        """``_deliver`` for each of a turn's pushes cut together, in one pass: each send in its
        place in ``served``, their progress and rate buckets at once (``Lifecycle.pushed_all``).
        """
        lifecycle, scheduler, live = self._lifecycle, self._scheduler, self.live
        epoch, seq, tick = stamp.epoch, stamp.seq, stamp.tick
        pushed: list[tuple[Subscription, int, int]] = []
        for (at, subscription, _), found in zip(due, cuts, strict=True):
            if found is None:
                scheduler.idle(subscription.key)  # woken, but nothing is new for it
                continue
            body, after = found
            held = subscription.held
            advanced = held is None or held.epoch != epoch or held.seq != seq
            lifecycle.holds(subscription, after, stamp)
            if not (body.full or body.changes):
                if not advanced:
                    scheduler.idle(subscription.key)  # a new state, but no new tick nor change
                    continue
                pushed.append((subscription, 0, 0))
                self._counters.no_updates += 1
                no_update = NoUpdate(subscription.sub, epoch, seq, tick)
                served[at].append(Send(subscription.client, no_update))
                continue
            data = live.deliver(subscription, stamp, body) or encode_push(
                subscription.sub, stamp, body
            )
            pushed.append((subscription, len(data), body.changes))
            self._counters.pushes += 1
            self._counters.pushed_ticks.append(stamp.tick_time)
            served[at].append(Send(subscription.client, data))
        lifecycle.pushed_all(pushed, now)

    def _unchanged(
        self,
        kind: DatasetKind,
        due: list[tuple[int, Subscription, Hashable]],
        served: list[list[Send]],
        now: float,
    ) -> None:
        """The no-updates of a turn's quiet views of ``kind``, made together: their progress
        and rate buckets in one pass (``Lifecycle.unchanged``); each in its place in
        ``served``."""
        buffer = kind.state.buffer
        stamp = buffer.stamp
        assert stamp is not None
        subscriptions = [subscription for _, subscription, _ in due]
        pushed = self._lifecycle.unchanged(subscriptions, stamp, buffer.generation, now)
        self._counters.no_updates += pushed.count(True)
        epoch, seq, tick = stamp.epoch, stamp.seq, stamp.tick
        for (at, subscription, _), sent in zip(due, pushed, strict=True):
            if sent:
                no_update = NoUpdate(subscription.sub, epoch, seq, tick)
                served[at].append(Send(subscription.client, no_update))

    def _triage(
        self, sid: SubKey, idle: Callable[[int], bool]
    ) -> list[Send] | tuple[Subscription, DatasetKind, Hashable]:
        """What to do with a popped subscription: the sends that settle it (none when it
        waits or is gone), or (subscription, kind, located view) when it is to be pushed."""
        subscription = self._downstream.get(sid)
        if subscription is None:
            self._scheduler.remove(sid)
            return []
        kind = self._kinds.get(subscription.dataset)
        located: Hashable | None = None
        if kind is not None and kind.state.buffer.stamp is not None:
            try:
                located = kind.locate(subscription)
            except EntityNotHeld as exc:
                return [self._fail(subscription, exc)]
        if kind is None or located is None or not self._servable(subscription, kind, located):
            self._lifecycle.uncovered(subscription)
            return []
        if not idle(subscription.client):
            self._lifecycle.busy(subscription)
            return []
        return subscription, kind, located

    def _fail(self, subscription: Subscription, exc: EntityNotHeld) -> Send:
        self._lifecycle.end(subscription)
        self._counters.ended += 1
        return Send(subscription.client, Error(exc.code, str(exc), ref=subscription.sub))

    def _servable(self, subscription: Subscription, kind: DatasetKind, located: Hashable) -> bool:
        """Whether ready primitives cover the view where it is now (``located``).

        Coverage is asked again only when it may have changed: the view moved, some coverage
        shrank, or — for a view not yet servable — some grew.
        """
        parts = self._parts
        seen_view, shrunk, grown = subscription.coverage_seen
        stale = seen_view != located or shrunk != parts.shrunk
        if stale or (not subscription.servable and grown != parts.grown):
            seen = (located, parts.shrunk, parts.grown)
            self._lifecycle.judged(subscription, kind.covered(located), seen)
        return subscription.servable

    def _fitted(self, subscription: Subscription, now: float) -> bool | None:
        """Whether a subscription's pushes are fitted to its link (``latest`` ones of a fitted
        link), at the detail the link takes; None if it is put off until its link takes more."""
        links, client = self.links, subscription.client
        if client not in links.fitted or subscription.mode != "latest":
            if subscription.coarse:
                self._lifecycle.detail(subscription, False)
            return False
        until = links.until(client, now)
        if until is not None:
            self._lifecycle.over_budget(subscription, until)
            return None
        if subscription.coarse != (coarse := links.coarse(client)):
            self._lifecycle.detail(subscription, coarse)
        return True

    def _fit(
        self, subscription: Subscription, found: Cut, now: float
    ) -> tuple[Cut | None, float | None]:
        """What of a cut push its fitted link takes now (``relay.core.links``, rule 4): the
        push, its creations and deletions alone, or nothing; and when to push again (None:
        when a new state comes, as after any push)."""
        body, after = found
        before, important = subscription.held, body.important()
        whole = len(body.entered) + len(body.updated) + len(body.left)
        alone = isinstance(before, Held) and isinstance(after, Held) and important is not None
        verdict, again = self.links.fit(
            subscription.client,
            subscription.sub,
            subscription.rate,
            whole=whole,
            important=whole - len(body.updated) if alone else 0,
            now=now,
        )
        if verdict is Fit.WHOLE:
            return found, None
        if verdict is Fit.IMPORTANT:
            assert important is not None and isinstance(before, Held) and isinstance(after, Held)
            return (important, after.owing_moves(before)), again
        return None, again

    def _push(
        self,
        subscription: Subscription,
        kind: DatasetKind,
        located: Hashable,
        now: float,
        fitted: bool = False,
    ) -> list[Send]:
        """One push of a ``latest`` subscription (``fitted`` to its link: ``_fit``); its end if
        it cannot be served."""
        try:
            found = kind.cut(subscription, located)
        except EntityNotHeld as exc:
            return [self._fail(subscription, exc)]
        except InvalidView as exc:  # a SQL view's query failed on the current rows
            self._lifecycle.end(subscription)
            return [Send(subscription.client, Error(exc.code, str(exc), ref=subscription.sub))]
        stamp = kind.state.buffer.stamp
        assert stamp is not None
        again: float | None = None
        if fitted and found is not None:
            found, again = self._fit(subscription, found, now)
            if found is None:
                assert again is not None
                self._lifecycle.over_budget(subscription, again)
                return []
        send = self._deliver(subscription, stamp, found, now)
        step = kind.ticking(subscription.view)
        if step is None and found is not None and found[1].stale is not None:
            step = 0.0  # rows its rate tiers held back go at its rate (``tiering`` rule 4)
        if again is not None and subscription.key in self._scheduler:  # its moves are owed
            self._scheduler.defer(subscription.key, again)
        elif step is not None and subscription.key in self._scheduler:  # time alone changes it
            self._scheduler.defer(subscription.key, now + max(1.0 / subscription.rate, step))
        return [] if send is None else [send]

    def _deliver(
        self, subscription: Subscription, stamp: Stamp, found: Cut | None, now: float
    ) -> Send | None:
        """Record what the subscriber holds after ``found`` (cut from the state ``stamp``
        names); the push, no-update, or nothing."""
        if found is None:
            self._scheduler.idle(subscription.key)  # woken, but nothing is new for it
            return None
        body, after = found
        held = subscription.held
        advanced = held is None or (held.epoch, held.seq) != (stamp.epoch, stamp.seq)
        self._lifecycle.holds(subscription, after, stamp)
        if not (body.full or body.changes or advanced):
            self._scheduler.idle(subscription.key)  # a new state, but no new tick nor change
            return None
        if not (body.full or body.changes):
            self._lifecycle.pushed(subscription, now)
            self._counters.no_updates += 1
            no_update = NoUpdate(subscription.sub, stamp.epoch, stamp.seq, stamp.tick)
            return Send(subscription.client, no_update)
        data = self.live.deliver(subscription, stamp, body) or encode_push(
            subscription.sub, stamp, body
        )
        self._lifecycle.pushed(subscription, now, 1, len(data), body.changes)
        self._counters.pushes += 1
        self._counters.pushed_ticks.append(stamp.tick_time)
        return Send(subscription.client, data)
