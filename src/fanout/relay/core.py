"""The relay's logic, sans I/O (STYLE.md rule 1): frames and the clock in, frames out.

The asyncio shell (``relay.server``) feeds it what subscribers and the publisher send, tells it
when a connection can take more, and pulls the pushes that are due. Everything a relay decides —
coverage, upstream primitives, applying batches, scheduling, deltas and transforms per subscriber
— happens here, so whole conversations are tested without sockets.

One round of pushing (``serve``), as in 000 [0144] and [0150]:

1. end the epoch: every dataset whose inert buffer took batches since the last round swaps
   buffers (``relay.state``); primitives whose snapshots came with those batches become ready
   at that moment, together with their rows; the dataset's subscriptions have something new;
2. the scheduler (``relay.scheduler``) hands out due subscriptions, highest aged priority first;
   one whose connection is still writing, or whose coverage is not ready, is parked and keeps
   its age;
3. each push is cut from the active buffer (``relay.pushes``), transformed for its subscriber
   (``relay.transforms``), and encoded once per distinct (view, transform, held state).

``serve`` yields pushes one at a time, so the shell can stop a round on a time budget and yield
to its event loop; what was not served stays queued with its aged priority. Steps 2 and 3 live in
``relay.serving``, ``every`` mode in ``relay.everymode``: both are mixed into :class:`RelayCore`.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence

import msgspec

from fanout.errors import BadRequest, InvalidView, ProtocolError
from fanout.relay import planner, relative
from fanout.relay.downstream import Downstream, Subscription
from fanout.relay.every import History
from fanout.relay.everymode import every_cursor
from fanout.relay.ingest import DatasetState, Intake
from fanout.relay.keyed import KeyedState, dataset_state
from fanout.relay.planner import Policy, Region
from fanout.relay.pushes import Encodings
from fanout.relay.scheduler import AGING, Scheduler
from fanout.relay.sends import UPSTREAM, Counters, Send
from fanout.relay.serving import Serving
from fanout.relay.tables import QUERY_TIMEOUT
from fanout.relay.tableviews import TableViews
from fanout.relay.throttle import SQL_BURST, SQL_SHARE, Budgets
from fanout.relay.transforms import InvalidTransform, Shape, resolve
from fanout.relay.upstream import Primitive, Upstream
from fanout.views import View
from fanout.views.entity import Entity
from fanout.views.region import Box, RegionUnion, Relative, Sector, Sphere
from fanout.views.sql import Sql
from fanout.wire.messages import (
    Acquire,
    Batch,
    Catalog,
    Error,
    Release,
    Subscribe,
    Subscribed,
    Unsubscribe,
    Unsubscribed,
)

__all__ = ["UPSTREAM", "RelayCore", "Send"]

log = logging.getLogger(__name__)

MAX_RATE = 1000.0
#: Seconds after a release during which rows inside the released primitive (and no other) are
#: pruned at each housekeeping: batches already on their way may still bring some.
PRUNE_WINDOW = 2.0
#: Subscriptions one subscriber connection may hold at once (``RelayConfig.max_subscriptions``):
#: each holds its rows' keys and a scheduler slot, so a connection's memory is bounded.
MAX_SUBSCRIPTIONS = 10_000


class RelayCore(Serving):
    """Subscriptions, upstream primitives, state and scheduling of one relay."""

    def __init__(
        self,
        policy: Policy | None = None,
        aging: float = AGING,
        *,
        query_timeout: float = QUERY_TIMEOUT,
        max_subscriptions: int = MAX_SUBSCRIPTIONS,
        sql_share: float = SQL_SHARE,
        sql_burst: float = SQL_BURST,
    ) -> None:
        self.policy = policy or Policy()
        self.max_subscriptions = max_subscriptions
        self.upstream = Upstream()
        self.downstream = Downstream()
        self.datasets: dict[str, DatasetState] = {}
        self._start_every()
        # A turn can be several frames (``every`` mode); what a stopped round did not yield of
        # it goes out first in the next round, so nothing decided is lost.
        self._unsent: deque[Send] = deque()
        self.scheduler = Scheduler(aging)
        self.encodings = Encodings()
        self.tableviews = TableViews(query_timeout)  # SQL, topic and object-path views
        self.sql_budgets = Budgets(sql_share, sql_burst)  # SQL time per connection
        self.counters = Counters()
        self._capabilities: dict[int, tuple[str, ...]] = {}
        self._grown = 0
        self._shrunk = 0

    @property
    def pushes_sent(self) -> int:
        """Pushes and no-updates sent so far."""
        return self.counters.pushes + self.counters.no_updates

    # -- upstream -----------------------------------------------------------------------

    def on_upstream_connected(self) -> list[Send]:
        """The publisher connection is (re)established: acquire every primitive again.

        The new connection starts with no primitives at the publisher, so each one is acquired
        anew and becomes ready only when its snapshot arrives. What was missed meanwhile the
        publisher replays first (``resume_points`` went in the ``Hello``).
        """
        self.on_upstream_lost()
        self._horizons.clear()  # a new connection holds nothing: told again at housekeeping
        return [Send(UPSTREAM, Acquire(p.prim, p.dataset, p.view)) for p in self.upstream]

    def resume_points(self) -> dict[str, tuple[int, int]]:
        """(epoch, last seq applied) per dataset, for the ``Hello`` of a reconnection."""
        return {name: (s.epoch, s.seq) for name, s in self.datasets.items() if s.seq >= 0}

    def on_upstream_lost(self) -> None:
        """The publisher connection dropped: nothing is ready until it is back."""
        self.upstream.unready()
        self._shrunk += 1
        for state in self.datasets.values():
            state.readying.clear()
        for history in self.histories.values():
            history.forget_requests()  # they are asked again once coverage is back
        for name in self.datasets:
            self._distrust(name)

    def on_catalog(self, catalog: Catalog) -> None:
        """Learn (or re-learn) the publisher's datasets.

        Raises:
            ProtocolError: a dataset the relay cannot hold (see ``DatasetState.of``); then
                nothing of the catalog is learnt.
        """
        fresh = {
            info.name: dataset_state(info)
            for info in catalog.datasets
            if (current := self.datasets.get(info.name)) is None or current.info != info
        }
        for state in fresh.values():
            info = state.info
            self.datasets[info.name] = state
            self.histories[info.name] = History()
            self.tableviews.define(info)
            self.encodings.forget(info.name)
            for subscription in self.downstream.of_dataset(info.name):
                subscription.held = None  # a new table: start over with a full push
                if subscription.cursor is not None:
                    subscription.cursor = None
                    self._owed_resync[subscription.key] = f"dataset {info.name!r} changed"
                self.scheduler.wake(subscription.key)

    def on_batch(self, batch: Batch) -> list[Send]:
        """Apply one batch from the publisher to the inert buffer, here and now.

        Raises:
            ProtocolError: the batch is for an unknown dataset or its columns are inconsistent.
        """
        intake = self.admit(batch)
        if intake is None:
            return []
        try:
            intake.write()
        finally:
            intake.state.busy = False
        return self.finish(intake)

    def admit(self, batch: Batch) -> Intake | None:
        """Take a batch into its dataset's stream; the caller then runs ``write`` and ``finish``.

        ``Intake.write`` may run on another thread: until ``finish``, the dataset is ``busy``
        and the core neither swaps nor prunes it. Returns None for a batch already applied
        (Spark re-ran a micro-batch after a failure).

        Raises:
            ProtocolError: the batch is for an unknown dataset.
        """
        state = self.datasets.get(batch.dataset)
        if state is None:
            raise ProtocolError(f"batch for unknown dataset {batch.dataset!r}")
        if state.is_replay(batch):
            return None
        snapshots = []
        for prim_id in batch.snapshots:
            prim = self.upstream.get(prim_id)
            if prim is not None:  # else released while its snapshot was on the way
                snapshots.append((prim_id, prim.view))
        state.busy = True
        return Intake(state, batch, snapshots, state.seq if state.is_gap(batch) else None)

    def finish(self, intake: Intake) -> list[Send]:
        """The batch of ``intake`` is written: its state may be swapped in; resync after a gap."""
        intake.state.busy = False
        self.counters.batches += 1
        if intake.gap_after is not None:
            batch = intake.batch
            log.warning(
                "gap in %s: batch %d after %d; resyncing",
                batch.dataset,
                batch.seq,
                intake.gap_after,
            )
            self._distrust(batch.dataset)
            return self._resync(batch.dataset)
        self._record(intake)
        return []

    def _resync(self, dataset: str) -> list[Send]:
        sends: list[Send] = []
        for prim in self.upstream.of(dataset):
            self.upstream.remove(prim.prim)
            sends.append(Send(UPSTREAM, Release(prim.prim)))
            fresh = self.upstream.add(dataset, prim.view)
            sends.append(Send(UPSTREAM, Acquire(fresh.prim, dataset, fresh.view)))
        self._shrunk += 1
        return sends

    def on_upstream_error(self, error: Error) -> list[Send]:
        """The publisher refused something: a refused primitive is dropped, and the
        subscriptions it leaves uncovered end with the publisher's error; ``every``
        subscriptions waiting for seqs it cannot give start again (``resync``)."""
        log.error("publisher error %s: %s (ref %s)", error.code, error.message, error.ref)
        for name, history in self.histories.items():
            if error.ref is not None and history.owns(error.ref):
                span = history.answered(error.ref)
                assert span is not None
                self._lost(name, span, error)
                return []
        if error.code == "resync":
            # The publisher cannot replay what we missed: the next batch is the new baseline,
            # and the snapshots of the primitives we acquired again repair the state.
            for state in self.datasets.values():
                state.seq = -1
        prim = None if error.ref is None else self.upstream.get(error.ref)
        if prim is None:
            return []
        self.upstream.remove(prim.prim)
        self._shrunk += 1
        self._distrust(prim.dataset)
        return self._refused(prim.dataset, error)

    def _refused(self, dataset: str, error: Error) -> list[Send]:
        """End the subscriptions of ``dataset`` that the primitives still held (ready or not)
        no longer cover: the publisher refused data they need, and nothing would ask again.
        A view relative to an entity is planned anew as the entity moves: it is left be."""
        sends: list[Send] = []
        state = self.datasets.get(dataset)
        for subscription in list(self.downstream.of_dataset(dataset)):
            view = subscription.view
            if isinstance(view, Relative):
                continue
            space = state is not None and state.info.index == "space"
            region = planner.as_region(view) if space else None
            if state is not None and self._covered(subscription, region, ready_only=False):
                continue
            self._end(subscription)
            message = f"the publisher refused data this view needs: {error.message}"
            sends.append(
                Send(subscription.client, Error(error.code, message, ref=subscription.sub))
            )
        return sends

    # -- downstream ---------------------------------------------------------------------

    def on_connect(self, client: int, capabilities: Sequence[str] = ()) -> None:
        """A subscriber connected, declaring ``capabilities`` in its ``Hello``."""
        self._capabilities[client] = tuple(capabilities)

    def on_disconnect(self, client: int) -> None:
        """A subscriber went away: its subscriptions end (primitives are released later)."""
        for subscription in self.downstream.of_client(client):
            self._end(subscription)
        self.scheduler.unpark(("client", client))
        self._capabilities.pop(client, None)
        self.sql_budgets.forget(client)

    def on_writable(self, client: int) -> bool:
        """A connection wrote everything it had: its parked subscriptions may be served.

        Returns:
            Whether any subscription was waiting for it (pushing has work).
        """
        return self.scheduler.unpark(("client", client)) > 0

    def on_subscribe(self, client: int, request: Subscribe, now: float | None = None) -> list[Send]:
        """Add a subscription, or change it if ``request.sub`` is already in use.

        ``now`` (monotonic seconds) dates a view change, so the planner learns how fast a view
        moves (``Policy.lead``); without it no velocity is estimated.
        """
        key = (client, request.sub)
        subscription = self.downstream.get(key)
        try:
            if subscription is None and self.downstream.count(client) >= self.max_subscriptions:
                raise BadRequest(
                    f"this connection holds {self.max_subscriptions} subscriptions, the most the"
                    " relay allows one connection (max_subscriptions); unsubscribe some first"
                )
            state = self._check(request)
            shape, row_key, columns = self._accept(client, request, state)
            cursor = every_cursor(request, state, shape, subscription)
        except (InvalidView, InvalidTransform, BadRequest) as exc:
            return [Send(client, Error(exc.code, str(exc), ref=request.sub))]
        sends: list[Send] = []
        # ``every`` subscriptions ignore the rate: each seq goes out as soon as it can.
        rate = MAX_RATE if request.mode == "every" else request.rate
        if subscription is None:
            subscription = Subscription(
                client, request.sub, request.dataset, request.view, request.rate, shape
            )
            subscription.mode, subscription.cursor = request.mode, cursor
            self.scheduler.add(key, request.priority, rate)
            reply = Subscribed(request.sub, row_key, columns)
            sends.append(Send(client, reply))
        else:
            self.downstream.remove(key)  # re-indexed below, perhaps under another dataset
            if (subscription.dataset, subscription.shape) != (request.dataset, shape):
                subscription.held = None  # rows in another form: send them all again
            self.scheduler.update(key, request.priority, rate)
            self.scheduler.wake(key, eager=subscription.held is None)
        _track_motion(subscription, request, now)
        subscription.view, subscription.rate = request.view, request.rate
        subscription.dataset, subscription.shape = request.dataset, shape
        subscription.priority = request.priority
        self.downstream.put(subscription)
        if isinstance(request.view, Relative):
            return sends + self._follow(request.dataset, request.view, entity=True)
        acquires = self._acquire_view(request.dataset, request.view, subscription.velocity)
        if not acquires and not any(map(self.upstream.pending, self._reads(subscription))):
            # Held primitives cover the view and all of them are ready: it is servable, and
            # the coverage algebra need not be asked again.
            subscription.servable = True
            subscription.coverage_seen = (request.view, self._shrunk, self._grown)
        return sends + acquires

    def _check(self, request: Subscribe) -> DatasetState:
        state = self.datasets.get(request.dataset)
        if state is None:
            known = ", ".join(self.datasets) or "none yet: the relay is not connected upstream"
            raise InvalidView(f"unknown dataset {request.dataset!r} (known: {known})")
        if not 0 < request.rate <= MAX_RATE:
            raise InvalidView(
                f"rate {request.rate!r} must be in (0, {MAX_RATE:g}] pushes per second"
            )
        if state.info.index != "space":
            return state  # its language is checked by ``TableViews.check``
        view = request.view
        if not isinstance(view, Box | Sphere | Sector | RegionUnion | Relative):
            raise InvalidView(
                f"dataset {request.dataset!r} takes region views (box, sphere, sector, union,"
                f" relative), not {type(view).__name__}"
            )
        if isinstance(view, Relative):
            relative.check(view, state)
        if view.dims != len(state.info.index_columns):
            raise InvalidView(
                f"dataset {request.dataset!r} is {len(state.info.index_columns)}-D; the view is"
                f" {view.dims}-D"
            )
        return state

    def _follow(self, dataset: str, view: Relative, entity: bool = False) -> list[Send]:
        """Acquire what a relative view needs now (``relay.relative``, rules 1 and 3).

        ``entity``: also its entity primitive if not held (only when subscribing: one the
        publisher refused is not asked for again).
        """
        sends: list[Send] = []
        if entity and self.upstream.entity(dataset, view.entity) is None:
            prim = self.upstream.add(dataset, Entity(view.entity))
            sends.append(Send(UPSTREAM, Acquire(prim.prim, dataset, prim.view)))
        resolved = relative.locate(view, self.datasets[dataset])
        if resolved is not None:
            sends += self._acquire_for(dataset, resolved)
        return sends

    def _accept(
        self, client: int, request: Subscribe, state: DatasetState
    ) -> tuple[Shape, str, list[str]]:
        """The shape of a subscription's rows, their key and columns (for ``Subscribed``)."""
        capabilities = self._capabilities.get(client, ())
        if state.info.index == "space":
            shape = resolve(request.transform, state.info, capabilities)
            return shape, state.info.key, list(shape.columns)
        accepted = self.tableviews.check(
            request.view, request.transform, state, self.datasets, capabilities
        )
        if request.mode == "every" and isinstance(request.view, Sql):
            self.tableviews.check_every(request.view, self.datasets)
        return accepted.shape, accepted.key, accepted.columns

    def _acquire_view(
        self, dataset: str, view: View, moving: planner.Velocity | None = None
    ) -> list[Send]:
        if self.datasets[dataset].info.index == "space":
            return self._acquire_for(dataset, _region(view), moving)
        sends = []
        for name, piece in self.tableviews.to_acquire(self.upstream, dataset, view):
            prim = self.upstream.add(name, piece)
            sends.append(Send(UPSTREAM, Acquire(prim.prim, name, piece)))
        return sends

    def _reads(self, subscription: Subscription) -> tuple[str, ...]:
        """The datasets a subscription reads: its own, and those a SQL join reads."""
        if self.datasets[subscription.dataset].info.index == "space":
            return (subscription.dataset,)
        return self.tableviews.reads(subscription.dataset, subscription.view)

    def _acquire_for(
        self, dataset: str, view: Region, moving: planner.Velocity | None = None
    ) -> list[Send]:
        held = self.upstream.cover(dataset)
        sends: list[Send] = []
        for box in planner.to_acquire(held, view, self.policy, moving):
            prim = self.upstream.add(dataset, box)
            sends.append(Send(UPSTREAM, Acquire(prim.prim, dataset, box)))
        return sends

    def on_unsubscribe(self, client: int, request: Unsubscribe) -> list[Send]:
        """End a subscription."""
        subscription = self.downstream.get((client, request.sub))
        if subscription is None:
            message = f"no subscription {request.sub} on this connection"
            return [Send(client, Error("unknown_subscription", message, ref=request.sub))]
        self._end(subscription)
        return [Send(client, Unsubscribed(request.sub))]

    def _end(self, subscription: Subscription) -> None:
        self.downstream.remove(subscription.key)
        self.scheduler.remove(subscription.key)
        self._owed_resync.pop(subscription.key, None)

    # -- pushing ------------------------------------------------------------------------

    def end_epoch(self) -> list[Send]:
        """Swap in every dataset's new state (000: [0150], steps 1070b-1070d).

        Primitives whose snapshots arrived with that state become ready with it, and the
        dataset's subscriptions are woken: each has a new state to be pushed. Views relative
        to an entity that moved may need more upstream: the acquires are returned.
        """
        sends: list[Send] = []
        for name, state in self.datasets.items():
            before = state.buffer.stamp
            if state.busy or not state.buffer.swap():
                continue
            after = state.buffer.stamp
            refresh = before is not None and after is not None and before.epoch != after.epoch
            self._ready_snapshots(name, state)
            followed: set[Relative] = set()  # subscribers sharing a view share its planning
            for subscription in self._readers(name, state):
                view = subscription.view
                if isinstance(view, Relative) and view not in followed:
                    followed.add(view)
                    sends += self._follow(name, view)
                if refresh and subscription.held is not None:
                    subscription.held = msgspec.structs.replace(subscription.held, refresh=True)
                self.scheduler.wake(subscription.key)
        return sends

    def _ready_snapshots(self, name: str, state: DatasetState) -> None:
        grew = False
        stamp = state.buffer.stamp
        for prim_id in state.readying:
            prim = self.upstream.get(prim_id)
            if prim is not None and not prim.ready:
                self.upstream.make_ready(prim)
                prim.ready_seq = -1 if stamp is None else stamp.seq
                grew = True
        state.readying.clear()
        if grew:
            self._grown += 1
            self.scheduler.unpark(("coverage", name))
            if state.info.index == "sql":  # a join of another dataset may read it
                for other in self.datasets:
                    self.scheduler.unpark(("coverage", other))

    def _readers(self, name: str, state: DatasetState) -> list[Subscription]:
        """The subscriptions a new state of dataset ``name`` concerns (SQL joins read several)."""
        if state.info.index != "sql":
            return self.downstream.of_dataset(name)
        return [s for s in self.downstream if name in self._reads(s)]

    # -- housekeeping -------------------------------------------------------------------

    def housekeeping(self, now: float) -> list[Send]:
        """Release primitives unneeded for longer than the grace period; prune their rows."""
        sends: list[Send] = []
        for name, state in self.datasets.items():
            if isinstance(state, KeyedState):
                sends.extend(self._housekeep_keyed(name, state, now))
                continue
            prims = self.upstream.of(name)
            spare = self._spare(prims, self.downstream.views(name), state)
            for prim in self._release_spare(prims, spare, now, sends):
                if not isinstance(prim.view, Entity):
                    state.released.append((_region(prim.view), now))
            self._prune(state, now)
        return sends + self._horizon_sends()

    def _release_spare(
        self, prims: list[Primitive], spare: set[int], now: float, sends: list[Send]
    ) -> list[Primitive]:
        """Release the ``spare`` primitives unneeded for the grace period (appending the
        ``Release`` frames to ``sends``); returns them. The others' grace clocks restart."""
        released = []
        for prim in prims:
            if prim.prim not in spare:
                prim.unneeded_since = None
                continue
            if prim.unneeded_since is None:
                prim.unneeded_since = now
            if now - prim.unneeded_since >= self.policy.grace:
                # Spare: every view it touches stays covered by the other ready primitives,
                # so no subscription's coverage changes (``_shrunk`` stays).
                self.upstream.remove(prim.prim)
                sends.append(Send(UPSTREAM, Release(prim.prim)))
                released.append(prim)
        return released

    def _spare(self, prims: list[Primitive], views: list[View], state: DatasetState) -> set[int]:
        """Primitives no subscription needs (relative views count where they are now)."""
        regions = [p for p in prims if not isinstance(p.view, Entity)]
        needed = relative.needed(views, state)
        spare = {p.prim for p in planner.unneeded(regions, needed)}
        return spare | relative.spare_entities(prims, views)

    def _housekeep_keyed(self, name: str, state: KeyedState, now: float) -> list[Send]:
        """``housekeeping`` for a SQL, topic or path dataset."""
        prims = self.upstream.of(name)
        subscribed = [(s.dataset, s.view) for s in self.downstream]
        if state.info.index == "sql":
            self.tableviews.keep([view for _, view in subscribed])
        needs = self.tableviews.needs(name, subscribed)
        spare = {p.prim for p in self.tableviews.unneeded(name, prims, needs)}
        sends: list[Send] = []
        for prim in self._release_spare(prims, spare, now, sends):
            state.dropped.append((prim.view, now))
        state.prune(now, PRUNE_WINDOW, self.upstream.views(name))
        return sends

    def _prune(self, state: DatasetState, now: float) -> None:
        """Drop rows inside recently released primitives and outside every held one.

        Batches already on their way when a release was sent may still carry rows of that
        primitive, so the area is pruned again at each housekeeping for ``PRUNE_WINDOW``.
        """
        state.released = [(r, t) for r, t in state.released if now - t <= PRUNE_WINDOW]
        if not state.released or state.busy:
            return  # a busy dataset is pruned at the next housekeeping
        released = [region for region, _ in state.released]
        prims = self.upstream.of(state.info.name)
        held = [_region(p.view) for p in prims if not isinstance(p.view, Entity)]
        kept = [r for r in held if any(planner.overlaps(r, gone) for gone in released)]
        entities = [p.view.key for p in prims if isinstance(p.view, Entity)]
        state.buffer.delete_inside(released, kept, entities)

    def stats(self) -> dict[str, float]:
        """Counters of the relay's work, for logs and benchmarks (STYLE.md rule 4)."""
        buffers = [state.buffer.counters for state in self.datasets.values()]
        subscriptions = list(self.downstream)
        return {
            "subscriptions": len(subscriptions),
            "primitives": len(self.upstream),
            "primitives_acquired": self.upstream.added,
            "rows": sum(len(state.buffer.active) for state in self.datasets.values()),
            "batches": self.counters.batches,
            "swaps": sum(b.swaps for b in buffers),
            "catch_up_replays": sum(b.replays for b in buffers),
            "catch_up_copies": sum(b.copies for b in buffers),
            "pushes": self.counters.pushes,
            "no_updates": self.counters.no_updates,
            "bodies_cut": self.encodings.cut,
            "bodies_shared": self.encodings.shared,
            "every_steps_computed": self.steps.computed,
            "every_steps_shared": self.steps.shared,
            "ticks_coalesced": sum(s.coalesced for s in subscriptions),
            "pushes_deferred": sum(s.deferred for s in subscriptions),
            "pending": self.scheduler.waiting(),
            "parked": self.scheduler.parked_count,
            "ended_entity_not_held": self.counters.ended,
            **self.tableviews.stats(),
            "sql_pushes_put_off": self.sql_budgets.put_off,
        }


_region = planner.as_region


def _track_motion(subscription: Subscription, request: Subscribe, now: float | None) -> None:
    """Update a subscription's velocity from a change of its view at ``now`` (if dated)."""
    if now is None:
        return
    if subscription.moved_at is None or subscription.dataset != request.dataset:
        subscription.velocity = None
    elif request.view != subscription.view:
        elapsed = now - subscription.moved_at
        subscription.velocity = planner.velocity(subscription.view, request.view, elapsed)
    else:
        return  # the same view again: it did not move
    subscription.moved_at = now
