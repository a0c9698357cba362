"""The relay's logic, sans I/O: frames, the clock and budgets in, frames out.

The asyncio shell (``relay.shell.server``) feeds it what subscribers and the publisher send, tells
it when a connection can take more, and pulls the pushes that are due; it also makes the query
engine SQL views run in (``relay.data.engine``), so no database, thread or clock is inside, and
whole conversations are tested without sockets. It composes the stores, each dataset's kind
(``relay.kinds``), the subscription lifecycle, rounds of pushes and ``every`` mode, and never asks
which kind it holds. A round of pushing (``serve``: end the epoch, hand out due subscriptions,
cut, transform and encode each push): docs/concepts.md, "How a relay pushes".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Generator, Sequence

from fanout.errors import BadRequest, InvalidView, ProtocolError
from fanout.relay import kinds
from fanout.relay.core import tiering
from fanout.relay.core.changesets import History
from fanout.relay.core.downstream import Asked, Downstream, Subscription
from fanout.relay.core.every import EVERY_BURST, EveryMode, every_cursor
from fanout.relay.core.holding import Holding
from fanout.relay.core.lifecycle import Lifecycle
from fanout.relay.core.planner import Policy
from fanout.relay.core.scheduler import AGING, Scheduler
from fanout.relay.core.sends import UPSTREAM, Counters, Send
from fanout.relay.core.serving import Serving, never
from fanout.relay.core.stats import core_stats
from fanout.relay.core.throttle import SQL_BURST, SQL_SHARE, Budgets
from fanout.relay.core.transducing import Transducing
from fanout.relay.core.transforms import InvalidTransform
from fanout.relay.core.upstream import Primitive, Upstream
from fanout.relay.data.buffers import new_tick
from fanout.relay.data.engine import QueryEngine
from fanout.relay.data.intake import DatasetState, Intake
from fanout.relay.data.pushes import Encodings
from fanout.relay.kinds import DatasetKind, Parts
from fanout.transducers import InvalidTransducer, Transducers
from fanout.wire.messages import (
    Acquire,
    Batch,
    Catalog,
    Error,
    Knowledge,
    Release,
    Subscribe,
    Unsubscribe,
    Unsubscribed,
)

__all__ = ["UPSTREAM", "RelayCore", "Send"]

log = logging.getLogger(__name__)

MAX_RATE = 1000.0
#: Subscriptions one subscriber connection may hold at once (``RelayConfig.max_subscriptions``):
#: each holds its rows' keys and a scheduler slot, so a connection's memory is bounded.
MAX_SUBSCRIPTIONS = 10_000


class RelayCore:
    """Subscriptions, upstream primitives, state and scheduling of one relay.

    Attributes:
        parts: the stores, shared with each dataset's kind.
        upstream, downstream, datasets: the primitives held, the subscriptions served, the
            relay's copy of each dataset (``parts``'s).
        scheduler: when each subscription is due.
        every: ``every`` mode's change sets and cursors.
    """

    def __init__(
        self,
        policy: Policy | None = None,
        aging: float = AGING,
        *,
        engine: QueryEngine | None = None,
        max_subscriptions: int = MAX_SUBSCRIPTIONS,
        sql_share: float = SQL_SHARE,
        sql_burst: float = SQL_BURST,
        holding: Holding | None = None,
        every_burst: int = EVERY_BURST,
        transducers: Transducers | None = None,
    ) -> None:
        """
        Args:
            policy: how regions are planned and unneeded primitives kept.
            aging: how fast a waiting subscription's priority rises.
            engine: where SQL views run (``relay.data.tables.TableStore``); without one, a catalog
                with a SQL dataset is refused.
            max_subscriptions: subscriptions one connection may hold.
            sql_share, sql_burst: each connection's share of the loop for SQL pushes.
            holding: where subscriptions to datasets not known yet wait for a catalog.
            every_burst: seqs an ``every`` subscription is sent at most per turn; transducers:
                what transduced subscriptions may name (``fanout.transducers``).
        """
        self.parts = Parts(policy or Policy(), Upstream(), Downstream(), Encodings(), engine)
        # The parts the core itself uses most, as plain attributes (they are never replaced).
        self.upstream: Upstream = self.parts.upstream
        self.downstream: Downstream = self.parts.downstream
        self.datasets: dict[str, DatasetState] = self.parts.datasets
        self._kinds = self.parts.kinds
        self.max_subscriptions = max_subscriptions
        self.scheduler = Scheduler(aging)
        self.lifecycle = Lifecycle(self.parts.downstream, self.scheduler)
        self.counters = Counters()
        self.every = EveryMode(self.parts, self.lifecycle, self.counters, every_burst)
        budgets = Budgets(sql_share, sql_burst)
        self.serving = Serving(self.parts, self.lifecycle, self.every, budgets, self.counters)
        self._capabilities: dict[int, tuple[str, ...]] = {}
        #: Subscriptions to datasets not known yet, held until a catalog comes.
        self.holding = Holding() if holding is None else holding
        self.catalogued = False
        self.transducing = Transducing(transducers, self.lifecycle, self.serving)
        self.serving.live.transduced = self.transducing.transduced

    @property
    def histories(self) -> dict[str, History]:
        """Each dataset's ``every``-mode change sets."""
        return self.every.histories

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
        self.every.upstream_connected()
        self.catalogued = True  # the catalog came first
        sends = [Send(UPSTREAM, Acquire(p.prim, p.dataset, p.view)) for p in self.upstream]
        for held in self.holding.release():  # taken now as if they had just come
            sends += self.on_subscribe(held.client, held.request)
        return sends

    def resume_points(self) -> dict[str, tuple[int, int]]:
        """(epoch, last seq applied) per dataset, for the ``Hello`` of a reconnection."""
        return {name: (s.epoch, s.seq) for name, s in self.datasets.items() if s.seq >= 0}

    def on_upstream_lost(self) -> None:
        """The publisher connection dropped: nothing is ready until it is back."""
        self.catalogued = False
        self.upstream.unready()
        self.parts.shrunk += 1
        for state in self.datasets.values():
            state.readying.clear()
        self.every.upstream_lost()

    def on_catalog(self, catalog: Catalog) -> None:
        """Learn (or re-learn) the publisher's datasets: each one new or changed gets its
        kind, chosen from its index (``relay.kinds.make``), with an empty copy.

        Raises:
            ProtocolError: a dataset the relay cannot hold; then nothing of the catalog is
                learnt.
        """
        fresh = {
            info.name: kinds.make(info, self.parts)
            for info in catalog.datasets
            if (current := self.datasets.get(info.name)) is None or current.info != info
        }
        self.catalogued = True
        for name, kind in fresh.items():
            self.parts.kinds[name] = kind
            self.datasets[name] = kind.state
            self.every.define(name)
            self.parts.encodings.forget(name)
            for subscription in self.downstream.of_dataset(name):
                # A new table: start over with a full push.
                self.lifecycle.restart(subscription, f"dataset {name!r} changed")
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
            name, seq = intake.batch.dataset, intake.batch.seq
            log.warning("gap in %s: batch %d after %d; resyncing", name, seq, intake.gap_after)
            self.every.distrust(name)
            return self._resync(name)
        self.every.record(intake)
        return []

    def resync(self, dataset: str, prims: Collection[int] | None = None) -> list[Send]:
        """Acquire ``prims`` of ``dataset`` (default: all) anew and distrust its ``every``
        streams, as after a gap (a relay it came from was lost, or parts moved: ``cluster``)."""
        self.every.distrust(dataset)
        return self._resync(dataset, prims)

    def unready(self, dataset: str, prims: Sequence[int]) -> None:
        """An upstream relay's batches lack the changes inside ``prims`` until it sends their
        snapshots again (``Resync``): not ready until then, ``every`` streams distrusted."""
        wanted = set(prims)  # ids of this dataset's primitives only: others are not its
        self.upstream.unready({p.prim for p in self.upstream.of(dataset) if p.prim in wanted})
        if (state := self.datasets.get(dataset)) is not None:  # snapshots taken before it
            state.readying = [prim for prim in state.readying if prim not in wanted]
        self.parts.shrunk += 1
        self.every.distrust(dataset)

    def _resync(self, dataset: str, prims: Collection[int] | None = None) -> list[Send]:
        sends: list[Send] = []
        held = self.upstream.of(dataset) if prims is None else map(self.upstream.get, sorted(prims))
        for prim in (p for p in held if p is not None and p.dataset == dataset):
            self.upstream.remove(prim.prim)
            sends.append(Send(UPSTREAM, Release(prim.prim)))
            fresh = self.upstream.add(dataset, prim.view)
            sends.append(Send(UPSTREAM, Acquire(fresh.prim, dataset, fresh.view)))
        self.parts.shrunk += 1
        return sends

    def on_knowledge(self, knowledge: Knowledge) -> bool:
        """A logged micro-batch's whole change, in answer to curiosity (``relay.core.every``):
        whether a subscription was waiting for it (pushing has work). Raises ProtocolError: its
        columns do not fit the catalog."""
        return self.every.on_knowledge(knowledge)

    def on_upstream_error(self, error: Error) -> list[Send]:
        """The publisher refused something: a refused primitive is dropped, and the
        subscriptions it leaves uncovered end with the publisher's error; ``every``
        subscriptions waiting for seqs it cannot give start again (``resync``)."""
        log.error("publisher error %s: %s (ref %s)", error.code, error.message, error.ref)
        if self.every.refused(error):
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
        self.parts.shrunk += 1
        self.every.distrust(prim.dataset)
        return self._refused(prim.dataset, error)

    def _refused(self, dataset: str, error: Error) -> list[Send]:
        """End the subscriptions of ``dataset`` that the primitives still held (ready or not)
        no longer cover: the publisher refused data they need, and nothing would ask again.
        A view planned anew as it moves (relative to an entity) is left be."""
        sends: list[Send] = []
        kind = self.parts.kinds.get(dataset)
        for subscription in self.downstream.of_dataset(dataset):
            view = subscription.view
            if kind is not None and (kind.follows(view) or kind.covered(view, ready_only=False)):
                continue
            self.lifecycle.end(subscription)
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
            self.lifecycle.end(subscription)
        self.holding.drop(client)
        self.transducing.end_client(client)
        self.lifecycle.writable(client)
        self._capabilities.pop(client, None)
        self.serving.budgets.forget(client)
        self.serving.links.forget(client)

    def on_writable(self, client: int) -> bool:
        """A connection wrote everything it had: its waiting subscriptions may be served.

        Returns:
            Whether any subscription was waiting for it (pushing has work).
        """
        return self.lifecycle.writable(client)

    def on_subscribe(self, client: int, request: Subscribe, now: float | None = None) -> list[Send]:
        """Add a subscription, or change it if ``request.sub`` is already in use. ``now``
        (monotonic seconds) dates a view change, so the planner learns how fast a view moves
        (``Policy.lead``); without it no velocity is estimated."""
        key = (client, request.sub)
        subscription = self.downstream.get(key)
        if subscription is None and not self.holding.holds(*key):
            held = self.downstream.count(client) + self.holding.count(client)
            if held >= self.max_subscriptions:
                message = (
                    f"this connection holds {self.max_subscriptions} subscriptions, the most the"
                    " relay allows one connection (max_subscriptions); unsubscribe some first"
                )
                return [Send(client, Error(BadRequest.code, message, ref=request.sub))]
        if subscription is None and request.dataset not in self._kinds and not self.catalogued:
            refused = self.holding.hold(client, request, now)  # until the catalog comes
            return [] if refused is None else [Send(client, refused)]
        self.holding.drop(client, request.sub)  # held no longer: taken now
        try:
            kind = self._check(request)
            accepted = kind.accept(request, self._capabilities.get(client, ()))
            tiering.check(request, kind.state.info)
            shape = accepted.shape
            cursor = every_cursor(request, kind, shape, subscription)
            subscribed = self.transducing.accept(key, request, kind, accepted, subscription)
        except (InvalidView, InvalidTransform, BadRequest, InvalidTransducer) as exc:
            return [Send(client, Error(exc.code, str(exc), ref=request.sub))]
        sends: list[Send] = []
        # ``every`` subscriptions ignore the rate: each seq goes out as soon as it can.
        rate = MAX_RATE if request.mode == "every" else request.rate
        reads = kind.reads(request.view)
        asked = Asked(
            request.dataset,
            request.view,
            request.rate,
            shape,
            request.priority,
            request.mode,
            reads,
            request.relevance,
            request.confirmed,
        )
        if subscription is None:
            subscription = Subscription(client, request.sub, asked, cursor)
            self.lifecycle.start(subscription, rate, now)
            sends.append(Send(client, subscribed))
        else:
            self.lifecycle.changed(subscription, asked, rate, now)
            sends += self.serving.live.changed(subscription)  # asked confirmed rows now?
        added = kind.acquire(request.view, subscription.velocity, True)
        if not added and not any(map(self.upstream.pending, reads)):
            # Held primitives cover the view and all of them are ready: it is servable, and
            # the coverage algebra need not be asked again (a view that moves is, at its push).
            seen = (request.view, self.parts.shrunk, self.parts.grown)
            self.lifecycle.judged(subscription, True, seen)
        return sends + [Send(UPSTREAM, Acquire(p.prim, p.dataset, p.view)) for p in added]

    def _check(self, request: Subscribe) -> DatasetKind:
        kind = self._kinds.get(request.dataset)
        if kind is None:
            known = ", ".join(self.datasets) or "none yet: the relay is not connected upstream"
            raise InvalidView(f"unknown dataset {request.dataset!r} (known: {known})")
        if not 0 < request.rate <= MAX_RATE:
            raise InvalidView(
                f"rate {request.rate!r} must be in (0, {MAX_RATE:g}] pushes per second"
            )
        return kind

    def on_unsubscribe(self, client: int, request: Unsubscribe) -> list[Send]:
        """End a subscription."""
        subscription = self.downstream.get((client, request.sub))
        if subscription is None and self.holding.drop(client, request.sub):
            return [Send(client, Unsubscribed(request.sub))]
        if subscription is None:
            message = f"no subscription {request.sub} on this connection"
            return [Send(client, Error("unknown_subscription", message, ref=request.sub))]
        self.transducing.stop((client, request.sub))  # nothing of it after its Unsubscribed
        return [Send(client, Unsubscribed(request.sub))]

    # -- pushing ------------------------------------------------------------------------

    def serve(
        self, now: float, idle: Callable[[int], bool], out_of_time: Callable[[], bool] = never
    ) -> Generator[Send, None, None]:
        """End the epoch, then the pushes due now (``relay.core.serving.Serving.serve``)."""
        sends = self.serving.serve(now, idle, out_of_time, first=self.end_epoch())
        return self.transducing.through(sends, now)  # transduced subscriptions' replaced

    def pushes(self, now: float, idle: Callable[[int], bool]) -> list[Send]:
        """Every push due now (``serve`` to the end)."""
        return list(self.serve(now, idle))

    def next_wakeup(self, now: float) -> float | None:
        """When pushing has work next: ``now`` if it has now, a rate timer's time, or None."""
        if self.serving.has_unsent() or any(
            (state.buffer.dirty or state.readying) and not state.busy
            for state in self.datasets.values()
        ):
            return now
        wakeup = self.scheduler.next_wakeup()
        return None if wakeup is None else max(wakeup, now)

    def end_epoch(self) -> list[Send]:
        """Swap in every dataset's new state (CA 3197003 [0150], steps 1070b-1070d).

        Primitives whose snapshots arrived with it become ready; its readers are woken (as by a
        view change if no new seq came: ``buffers.new_tick``). Returned: the acquires of views
        that moved (relative to an entity), and the corrections of live writes it settles.
        """
        added: list[Primitive] = []
        confirmed: list[Send] = []
        for name, kind in self.parts.kinds.items():
            state = kind.state
            before = state.buffer.stamp
            if state.busy:
                continue
            if not state.buffer.swap():
                # Snapshots that changed no row (of a quiet dataset, stamped with the last seq)
                # leave nothing to swap in; their primitives are ready now (the table has them).
                if state.readying:
                    self._ready_snapshots(name)
                    readers = self.downstream.of_reader(name)
                    self.scheduler.wake_all([s.key for s in readers], eager=False)
                continue
            after = state.buffer.stamp
            refresh = before is not None and after is not None and before.epoch != after.epoch
            self._ready_snapshots(name)
            readers = self.downstream.of_reader(name)
            added += kind.after_swap(readers)
            for subscription in readers if refresh else ():
                self.lifecycle.new_epoch(subscription)
            tick = new_tick(before, after)  # None: only snapshots at the seq held
            self.scheduler.wake_all([s.key for s in readers], tick is not None, tick)
            confirmed += self.serving.live.swapped(name, after)  # writes it carries
        return [Send(UPSTREAM, Acquire(p.prim, p.dataset, p.view)) for p in added] + confirmed

    def _ready_snapshots(self, name: str) -> None:
        state = self.datasets[name]
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
            self.parts.grown += 1
            # Its own subscriptions, and those of other datasets that read it (SQL joins).
            readers = {s.dataset for s in self.downstream.of_reader(name)}
            self.lifecycle.coverage_grew({name} | readers)

    # -- housekeeping -------------------------------------------------------------------

    def housekeeping(self, now: float) -> list[Send]:
        """Release primitives unneeded for longer than the grace period, prune their rows;
        tell the publisher how far back ``every`` subscriptions may still ask."""
        sends = [Send(client, error) for client, error in self.holding.expired(now)]
        for kind in self.parts.kinds.values():
            sends += kind.housekeeping(now)
        return sends + self.every.horizons()

    def take_pushed_ticks(self) -> list[float]:
        """The wall-clock times of the ticks pushed since the last call (for the shell's
        tick-to-push latency; at most ``sends.PUSHED_TICKS`` of the latest)."""
        ticks = list(self.counters.pushed_ticks)
        self.counters.pushed_ticks.clear()
        return ticks

    def stats(self) -> dict[str, float]:
        """Counters of the relay's work, for logs, ``/metrics`` and benchmarks
        (``relay.core.stats``)."""
        return core_stats(self)
