"""The relay's logic, sans I/O (STYLE.md rule 1): frames and the clock in, frames out.

The asyncio shell (``relay.server``) feeds it what subscribers and the publisher send and asks it,
whenever something changed or a timer fired, which pushes are due. Everything a relay decides —
coverage, upstream primitives, applying batches, deltas per subscriber — happens here, so whole
conversations are tested without sockets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fanout.errors import InvalidView, ProtocolError
from fanout.relay import planner
from fanout.relay.downstream import Downstream, Subscription
from fanout.relay.planner import Policy, Region
from fanout.relay.state import Table
from fanout.relay.upstream import Upstream
from fanout.views import covers
from fanout.views.region import Box, RegionUnion, Sector, Sphere
from fanout.wire.columns import Columns, decode_columns, encode_columns
from fanout.wire.messages import (
    Acquire,
    Batch,
    Catalog,
    DatasetInfo,
    Error,
    Frame,
    NoUpdate,
    Push,
    Release,
    Subscribe,
    Subscribed,
    Unsubscribe,
    Unsubscribed,
)

log = logging.getLogger(__name__)

#: ``Send.to`` for frames bound to the publisher; clients are numbered from 1.
UPSTREAM = 0
MAX_RATE = 1000.0


@dataclass(frozen=True)
class Send:
    """A frame for the publisher (``to == UPSTREAM``) or for one client."""

    to: int
    frame: Frame


@dataclass
class DatasetState:
    """The relay's copy of one dataset and where it is in the stream."""

    info: DatasetInfo
    table: Table
    epoch: int = -1
    seq: int = -1
    tick: int = -1
    tick_time: float = 0.0


class RelayCore:
    """Subscriptions, upstream primitives and state of one relay."""

    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = policy or Policy()
        self.upstream = Upstream()
        self.downstream = Downstream()
        self.datasets: dict[str, DatasetState] = {}
        self.batches = 0
        self.pushes_sent = 0
        self._coverage_version = 0

    # -- upstream -----------------------------------------------------------------------

    def on_upstream_connected(self) -> list[Send]:
        """The publisher connection is (re)established: acquire every primitive again.

        The new connection starts with no primitives at the publisher, so each one is acquired
        anew and becomes ready only when its snapshot arrives.
        """
        self.upstream.unready()
        self._coverage_version += 1
        for state in self.datasets.values():
            state.seq = -1  # the next batch sets the baseline; snapshots repair the gap
        return [Send(UPSTREAM, Acquire(p.prim, p.dataset, p.view)) for p in self.upstream]

    def on_upstream_lost(self) -> None:
        """The publisher connection dropped: nothing is ready until it is back."""
        self.upstream.unready()
        self._coverage_version += 1

    def on_catalog(self, catalog: Catalog) -> None:
        """Learn (or re-learn) the publisher's datasets."""
        for info in catalog.datasets:
            current = self.datasets.get(info.name)
            if current is None or current.info != info:
                self.datasets[info.name] = DatasetState(info, Table(info.key, info.columns))

    def on_batch(self, batch: Batch) -> list[Send]:
        """Apply one batch from the publisher.

        Raises:
            ProtocolError: the batch is for an unknown dataset or its columns are inconsistent.
        """
        state = self.datasets.get(batch.dataset)
        if state is None:
            raise ProtocolError(f"batch for unknown dataset {batch.dataset!r}")
        if batch.epoch == state.epoch and batch.seq <= state.seq:
            return []  # a micro-batch Spark re-ran after a failure: already applied
        gap = state.seq >= 0 and batch.epoch == state.epoch and batch.seq != state.seq + 1
        if state.epoch not in (-1, batch.epoch):
            self._new_epoch(batch.dataset)
        upserts, deletes = self._decode(state.info, batch)
        self._apply(state, batch, upserts, deletes)
        self.batches += 1
        if gap:
            log.warning(
                "gap in %s: batch %d after %d; resyncing", batch.dataset, batch.seq, state.seq
            )
            return self._resync(batch.dataset)
        return []

    def _decode(self, info: DatasetInfo, batch: Batch) -> tuple[dict[str, np.ndarray], np.ndarray]:
        upserts = decode_columns(batch.upserts)
        if batch.upserts.length and set(upserts) != set(info.columns):
            raise ProtocolError(
                f"batch {batch.seq}: upsert columns {sorted(upserts)} are not"
                f" {sorted(info.columns)}"
            )
        keys = decode_columns(batch.deletes).get(info.key)
        deletes = np.empty(0, dtype=np.int64) if keys is None else keys.astype(np.int64)
        if batch.upserts.length:
            incoming = upserts[info.key]
            if len(np.unique(incoming)) != len(incoming):
                raise ProtocolError(f"batch {batch.seq}: duplicate keys in upserts")
        return upserts, deletes

    def _apply(
        self, state: DatasetState, batch: Batch, upserts: dict[str, np.ndarray], deletes: np.ndarray
    ) -> None:
        table = state.table
        coords = [table.column(name) for name in state.info.index_columns]
        for prim_id in batch.snapshots:
            prim = self.upstream.get(prim_id)
            if prim is None:
                continue  # released while its snapshot was on the way
            # The snapshot is the primitive's whole content: drop what we held there first, so
            # rows that left it while we were not subscribed do not linger.
            table.delete_where(_region(prim.view).match(*coords))
            coords = [table.column(name) for name in state.info.index_columns]
            prim.ready = True
            self._coverage_version += 1
        if batch.upserts.length:
            table.upsert(upserts, batch.seq)
        table.delete(deletes)
        state.epoch, state.seq = batch.epoch, batch.seq
        state.tick, state.tick_time = batch.tick, batch.tick_time

    def _new_epoch(self, dataset: str) -> None:
        # seqs restart in a new epoch: forget which seq each subscriber saw, so every row it
        # holds counts as updated at its next push.
        for subscription in self.downstream:
            if subscription.dataset == dataset:
                subscription.sent_seq = -1

    def _resync(self, dataset: str) -> list[Send]:
        sends: list[Send] = []
        for prim in self.upstream.of(dataset):
            self.upstream.remove(prim.prim)
            sends.append(Send(UPSTREAM, Release(prim.prim)))
            fresh = self.upstream.add(dataset, prim.view)
            sends.append(Send(UPSTREAM, Acquire(fresh.prim, dataset, fresh.view)))
        self._coverage_version += 1
        return sends

    def on_upstream_error(self, error: Error) -> None:
        """The publisher refused something; a refused primitive is dropped."""
        log.error("publisher error %s: %s (ref %s)", error.code, error.message, error.ref)
        if error.ref is not None and self.upstream.get(error.ref) is not None:
            self.upstream.remove(error.ref)
            self._coverage_version += 1

    # -- downstream ---------------------------------------------------------------------

    def on_disconnect(self, client: int) -> None:
        """A subscriber went away: its subscriptions end (primitives are released later)."""
        for subscription in self.downstream.of_client(client):
            self.downstream.remove(subscription.key)

    def on_subscribe(self, client: int, request: Subscribe) -> list[Send]:
        """Add a subscription, or change its view if ``request.sub`` is already in use."""
        try:
            state = self._check(request)
        except InvalidView as exc:
            return [Send(client, Error(exc.code, str(exc), ref=request.sub))]
        sends: list[Send] = []
        existing = self.downstream.get((client, request.sub))
        if existing is None:
            self.downstream.put(
                Subscription(client, request.sub, request.dataset, request.view, request.rate)
            )
            reply = Subscribed(request.sub, state.info.key, list(state.info.columns))
            sends.append(Send(client, reply))
        else:
            existing.view, existing.rate, existing.changed = request.view, request.rate, True
            existing.dataset = request.dataset
        return sends + self._acquire_for(request.dataset, _region(request.view))

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
            raise InvalidView(
                f"dataset {request.dataset!r} is not served by this relay's region index"
            )
        view = request.view
        if not isinstance(view, Box | Sphere | Sector | RegionUnion):
            raise InvalidView(
                f"dataset {request.dataset!r} takes region views (box, sphere, sector, union),"
                f" not {type(view).__name__}"
            )
        if view.dims != len(state.info.index_columns):
            raise InvalidView(
                f"dataset {request.dataset!r} is {len(state.info.index_columns)}-D; the view is"
                f" {view.dims}-D"
            )
        return state

    def _acquire_for(self, dataset: str, view: Region) -> list[Send]:
        held = self.upstream.views(dataset)
        sends: list[Send] = []
        for box in planner.to_acquire(held, view, self.policy):
            prim = self.upstream.add(dataset, box)
            self._coverage_version += 1
            sends.append(Send(UPSTREAM, Acquire(prim.prim, dataset, box)))
        return sends

    def on_unsubscribe(self, client: int, request: Unsubscribe) -> list[Send]:
        """End a subscription."""
        if self.downstream.remove((client, request.sub)) is None:
            message = f"no subscription {request.sub} on this connection"
            return [Send(client, Error("unknown_subscription", message, ref=request.sub))]
        return [Send(client, Unsubscribed(request.sub))]

    # -- pushing ------------------------------------------------------------------------

    def pushes(self, now: float, idle: Callable[[int], bool]) -> list[Send]:
        """The pushes due now, to subscribers whose connection is ready for more (000: [0138])."""
        sends: list[Send] = []
        for subscription in self.downstream:
            state = self.datasets.get(subscription.dataset)
            if state is None or not self._due(subscription, state, now):
                continue
            if idle(subscription.client) and self._is_servable(subscription):
                sends.append(Send(subscription.client, self._push(subscription, state, now)))
        self.pushes_sent += len(sends)
        return sends

    def next_wakeup(self, now: float) -> float | None:
        """The earliest time a pending push becomes allowed by its subscription's rate."""
        times = [
            s.last_push + 1.0 / s.rate
            for s in self.downstream
            if (state := self.datasets.get(s.dataset)) is not None and _pending(s, state)
        ]
        return min(times, default=None)

    def _due(self, subscription: Subscription, state: DatasetState, now: float) -> bool:
        return (
            _pending(subscription, state)
            and now - subscription.last_push >= 1.0 / subscription.rate
        )

    def _is_servable(self, subscription: Subscription) -> bool:
        # Coverage only changes when primitives do, so the answer is cached per version.
        if subscription.coverage_seen != self._coverage_version or subscription.changed:
            ready = self.upstream.views(subscription.dataset, ready_only=True)
            subscription.servable = bool(ready) and covers(ready, subscription.view)
            subscription.coverage_seen = self._coverage_version
        return subscription.servable

    def _push(self, subscription: Subscription, state: DatasetState, now: float) -> Frame:
        table = state.table
        coords = [table.column(name) for name in state.info.index_columns]
        index = np.flatnonzero(_region(subscription.view).match(*coords))
        keys = table.keys[index]
        held = np.isin(keys, subscription.sent_keys, assume_unique=True)
        left = np.setdiff1d(subscription.sent_keys, keys, assume_unique=True)
        entered = index[~held]
        updated = index[held & (table.changed[index] > subscription.sent_seq)]
        first = subscription.first
        subscription.sent_keys, subscription.sent_seq = keys, state.seq
        subscription.first = subscription.changed = False
        subscription.last_push = now
        subscription.pushes += 1
        if not (first or len(entered) or len(updated) or len(left)):
            return NoUpdate(subscription.sub, state.epoch, state.seq, state.tick)
        return Push(
            sub=subscription.sub,
            epoch=state.epoch,
            seq=state.seq,
            tick=state.tick,
            tick_time=state.tick_time,
            full=first,
            entered=_rows(table, entered),
            updated=_rows(table, updated),
            left=encode_columns({table.key: left}),
        )

    # -- housekeeping -------------------------------------------------------------------

    def housekeeping(self, now: float) -> list[Send]:
        """Release primitives unneeded for longer than the grace period; prune their rows."""
        sends: list[Send] = []
        for name, state in self.datasets.items():
            prims = self.upstream.of(name)
            views = [_region(s.view) for s in self.downstream if s.dataset == name]
            spare = {p.prim for p in planner.unneeded(prims, views)}
            released = False
            for prim in prims:
                if prim.prim not in spare:
                    prim.unneeded_since = None
                    continue
                if prim.unneeded_since is None:
                    prim.unneeded_since = now
                if now - prim.unneeded_since >= self.policy.grace:
                    self.upstream.remove(prim.prim)
                    sends.append(Send(UPSTREAM, Release(prim.prim)))
                    released = True
            if released:
                self._coverage_version += 1
            self._prune(state)
        return sends

    def _prune(self, state: DatasetState) -> None:
        """Drop rows outside every held primitive (released ones, or rows that were in flight)."""
        table = state.table
        if not len(table):
            return
        coords = [table.column(name) for name in state.info.index_columns]
        covered = np.zeros(len(table), dtype=bool)
        for prim in self.upstream.of(state.info.name):
            covered |= _region(prim.view).match(*coords)
        table.delete_where(~covered)


def _pending(subscription: Subscription, state: DatasetState) -> bool:
    return state.seq >= 0 and (subscription.changed or state.seq != subscription.sent_seq)


def _region(view: object) -> Region:
    if not isinstance(view, Box | Sphere | Sector | RegionUnion):
        raise InvalidView(f"expected a region view, got {type(view).__name__}")
    return view


def _rows(table: Table, index: np.ndarray) -> Columns:
    if not len(index):
        return Columns()
    return encode_columns(table.take(index))
