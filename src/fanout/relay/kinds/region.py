"""Region datasets (index ``space``): rows with coordinates, views that are regions of space.

A view is a box, sphere, sector, union or intersection of them, or a region relative to a
moving entity (``relay.core.relative``). Upstream primitives are regions planned to serve many views
(``relay.core.planner``: tiles, margins, enclosures), held in a cover index; a view is servable when
ready primitives cover it (``fanout.views.covers``). Its pushes are cut from the active buffer
through the spatial index (``relay.data.pushes``), box views of one turn all together
(``relay.data.batchcut``), bodies shared by equal subscriptions (``pushes.Encodings``). A relay
below acquires regions and entities here; a region holds the rows whose coordinates lie
inside it, an entity primitive its entity's row.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence

import numpy as np

from fanout.errors import InvalidView
from fanout.relay.core import planner, relative, tiering
from fanout.relay.core.changesets import ChangeSet, Step, Steps, shared_step
from fanout.relay.core.downstream import Subscription
from fanout.relay.core.planner import Region, Velocity, as_region
from fanout.relay.core.sends import Send
from fanout.relay.core.transforms import InvalidTransform, Shape, resolve
from fanout.relay.core.upstream import Primitive, release_spare
from fanout.relay.data.batchcut import batchable, cut_boxes
from fanout.relay.data.buffers import Array, Keys, Mask, Table
from fanout.relay.data.intake import DatasetState
from fanout.relay.data.pushes import Body, Held, cut
from fanout.relay.kinds.base import PRUNE_WINDOW, Accepted, Cut, Parts, RelaySide
from fanout.relay.kinds.lens import RowLens
from fanout.relay.kinds.quiet import QuietViews
from fanout.views import View, covers
from fanout.views.entity import Entity
from fanout.views.members import members
from fanout.views.region import (
    SORTED_FROM,
    BinnedPoints,
    Box,
    Intersection,
    RegionUnion,
    Relative,
    Sector,
    Sphere,
)
from fanout.wire.messages import DatasetInfo, Subscribe


class RegionKind:
    """A ``space`` dataset at the relay (``relay.kinds.base.DatasetKind``)."""

    metered = False
    #: Whether box views no row changed in are pushed without a cut (``relay.kinds.quiet``);
    #: off only to compare with cutting every view (its property test).
    quiet_views = True

    def __init__(self, info: DatasetInfo, parts: Parts) -> None:
        """
        Raises:
            ProtocolError: the relay cannot hold the dataset (``DatasetState.of``).
        """
        self.state = DatasetState.of(info, info.index_columns)
        self.name = info.name
        self._parts = parts
        self._quiet = QuietViews()

    # -- subscribing ------------------------------------------------------------------

    def accept(self, request: Subscribe, capabilities: Sequence[str]) -> Accepted:
        """A region view of as many dimensions as the dataset's coordinates."""
        view, info = request.view, self.state.info
        if not isinstance(view, Box | Sphere | Sector | RegionUnion | Intersection | Relative):
            raise InvalidView(
                f"dataset {info.name!r} takes region views (box, sphere, sector, union,"
                f" intersection, relative), not {type(view).__name__}"
            )
        if isinstance(view, Relative):
            relative.check(view, self.state)
        if view.dims != len(info.index_columns):
            raise InvalidView(
                f"dataset {info.name!r} is {len(info.index_columns)}-D; the view is {view.dims}-D"
            )
        shape = resolve(request.transform, info, capabilities)
        return Accepted(shape, info.key, list(shape.columns))

    def check_every(self, view: View, shape: Shape) -> None:
        """Mode ``every`` takes absolute views and absolute coordinates."""
        if isinstance(view, Relative):
            raise InvalidView(
                "mode 'every' takes absolute views: a view relative to a moving entity is for"
                " mode 'latest'"
            )
        if shape.relative_to is not None:
            raise InvalidTransform(
                "mode 'every' sends rows as they changed, one seq at a time; coordinates"
                " relative to a moving entity (relative_to) are for mode 'latest'"
            )

    def reads(self, view: View) -> tuple[str, ...]:
        """Its own dataset."""
        return (self.name,)

    def acquire(self, view: View, moving: Velocity | None, subscribing: bool) -> list[Primitive]:
        """Plan and add the primitives the view needs; a relative view follows its entity
        (``relay.core.relative`` rules 1 and 3; its entity primitive only when ``subscribing``:
        one the publisher refused is not asked for again)."""
        if isinstance(view, Relative):
            return self._follow(view, entity=subscribing)
        if isinstance(view, Entity):  # held for a relay below that follows it
            held = self._parts.upstream.entity(self.name, view.key)
            return [] if held is not None else [self._parts.upstream.add(self.name, view)]
        return self._acquire_for(as_region(view), moving)

    def _follow(self, view: Relative, entity: bool) -> list[Primitive]:
        upstream = self._parts.upstream
        added: list[Primitive] = []
        if entity and upstream.entity(self.name, view.entity) is None:
            added.append(upstream.add(self.name, Entity(view.entity)))
        resolved = relative.locate(view, self.state)
        if resolved is not None:
            added += self._acquire_for(resolved, None)
        return added

    def _acquire_for(self, view: Region, moving: Velocity | None) -> list[Primitive]:
        upstream = self._parts.upstream
        return [upstream.add(self.name, box) for box in self._planned(view, moving)]

    def _planned(self, view: Region, moving: Velocity | None) -> list[Region]:
        held = self._parts.upstream.cover(self.name)
        policy = self._parts.policy
        # Only ``fit`` widening reads the other views (the view is among them already).
        views = self._parts.downstream.views(self.name) if policy.widen == "fit" else ()
        return planner.to_acquire(held, view, policy, moving, views)

    def needs(self, view: View) -> list[tuple[str, View]]:
        """The view itself (a relative view where its entity is now; nothing if not known)."""
        if isinstance(view, Relative):
            resolved = relative.locate(view, self.state)
            return [] if resolved is None else [(self.name, resolved)]
        return [(self.name, view)]

    def plan(self, view: View) -> list[tuple[str, View]]:
        """``acquire``'s primitives for ``view``, not added (a relative view where its entity
        is now, and its entity's primitive if not held)."""
        planned: list[View] = []
        if isinstance(view, Relative):
            if self._parts.upstream.entity(self.name, view.entity) is None:
                planned.append(Entity(view.entity))
            resolved = relative.locate(view, self.state)
            planned += [] if resolved is None else self._planned(resolved, None)
        elif isinstance(view, Entity):
            held = self._parts.upstream.entity(self.name, view.key)
            planned += [] if held is not None else [view]
        else:
            planned += self._planned(as_region(view), None)
        return [(self.name, piece) for piece in planned]

    # -- coverage ---------------------------------------------------------------------

    def locate(self, subscription: Subscription) -> Region | None:
        """The absolute region to push now (a relative view resolved; None: not yet)."""
        view = subscription.view
        if isinstance(view, Relative):
            return relative.region(view, self.state, self._parts.upstream)
        return view  # type: ignore[return-value]  # an absolute region: ``accept`` checked it

    def covered(self, located: Hashable, ready_only: bool = True) -> bool:
        """Whether held region primitives (ready ones only, unless asked) cover it; an entity
        (held for a relay below): whether its primitive is held (ready, unless asked)."""
        if isinstance(located, Entity):
            prim = self._parts.upstream.entity(self.name, located.key)
            return prim is not None and (prim.ready or not ready_only)
        held = self._parts.upstream.cover(self.name, ready_only=ready_only)
        return len(held) > 0 and covers(held, as_region(located))

    def follows(self, view: View) -> bool:
        """A relative view is planned anew as its entity moves."""
        return isinstance(view, Relative)

    # -- pushing ----------------------------------------------------------------------

    def batched(self, subscription: Subscription, located: Hashable) -> bool:
        """Box views are cut together (``relay.data.batchcut``), but those cut alone by
        ``tiering.cut``."""
        return (
            isinstance(located, Box)
            and batchable(located, subscription.shape)
            and not tiering.alone(subscription)
        )

    def cut(self, subscription: Subscription, located: Hashable) -> Cut | None:
        """The push of the region ``located`` (None: the subscriber holds the active state)."""
        if self._current(subscription):
            return None
        if tiering.alone(subscription):  # rows held back by rate tiers: never shared
            return tiering.cut(subscription, as_region(located), self.state)
        encodings, buffer = self._parts.encodings, self.state.buffer
        key = _body_key(subscription)
        body = encodings.get(self.name, buffer.generation, key)
        if body is None:
            body = cut(as_region(located), subscription.shape, subscription.held, buffer)
            encodings.put(self.name, key, body)
        return body, self._held_after(subscription, body)

    def cut_together(self, due: Sequence[tuple[Subscription, Hashable]]) -> list[Cut | None]:
        """``cut`` for box views, the bodies not yet encoded cut in one pass per shape."""
        return self._cut_boxes(due)

    def quiet(self, due: Sequence[tuple[Subscription, Hashable]]) -> list[bool]:
        """The box views no row changed in since their last push (``relay.kinds.quiet``)."""
        if not self.quiet_views:
            return [False] * len(due)
        return self._quiet.of(due, self.state.buffer)

    def _cut_boxes(self, due: Sequence[tuple[Subscription, Hashable]]) -> list[Cut | None]:
        """``cut`` for box views, the bodies not yet encoded cut in one pass per shape.

        ``_current``, ``_body_key`` and ``_held_after`` are inlined: this runs per push."""
        encodings, buffer = self._parts.encodings, self.state.buffer
        generation, stamp = buffer.generation, buffer.stamp
        assert stamp is not None
        cached: dict[Hashable, Body] | None = None  # this generation's bodies, once asked
        wanted: dict[Shape, dict[Hashable, tuple[Box, Held | None]]] = {}
        bodies: dict[Hashable, Body] = {}
        keys: list[Hashable | None] = []
        for subscription, located in due:
            held, view = subscription.held, subscription.view
            if (
                held is not None
                and held.generation == generation
                and held.view == view
                and held.stale is None
            ):
                keys.append(None)  # it holds the active state: nothing to push
                continue
            shape = subscription.shape
            key: Hashable = (view, shape, None if held is None else held.signature())
            keys.append(key)
            if key in bodies:
                continue
            if cached is None:
                cached = encodings.current(self.name, generation)
            body = cached.get(key)
            if body is not None:
                encodings.shared += 1
                bodies[key] = body
                continue
            assert isinstance(located, Box)
            wanted.setdefault(shape, {})[key] = (located, held)
        for shape, cuts in wanted.items():
            regions = [region for region, _ in cuts.values()]
            helds = [held for _, held in cuts.values()]
            made = dict(zip(cuts, cut_boxes(regions, helds, shape, buffer), strict=True))
            bodies.update(made)
            encodings.put_all(self.name, made)
        # ``bodies`` holds one body per distinct key pushed: the other pushes shared one.
        encodings.shared += len(keys) - keys.count(None) - len(bodies)
        epoch, seq = stamp.epoch, stamp.seq
        return [
            None
            if key is None
            else (
                body := bodies[key],
                Held(subscription.view, generation, epoch, seq, body.keys, body.anchor),
            )
            for (subscription, _), key in zip(due, keys, strict=True)
        ]

    def _current(self, subscription: Subscription) -> bool:
        """Whether the subscriber holds its view as of the active state (no row held back by
        its rate tiers): nothing to push. (Inlined in ``_cut_boxes``, as ``_held_after`` is:
        keep them alike.)"""
        held, buffer = subscription.held, self.state.buffer
        return (
            held is not None
            and held.generation == buffer.generation
            and held.view == subscription.view
            and held.stale is None
        )

    def _held_after(self, subscription: Subscription, body: Body) -> Held:
        buffer = self.state.buffer
        stamp = buffer.stamp
        assert stamp is not None
        return Held(
            subscription.view, buffer.generation, stamp.epoch, stamp.seq, body.keys, body.anchor
        )

    def query_seconds(self) -> float:
        """Region pushes run no queries."""
        return 0.0

    def ticking(self, view: View) -> float | None:
        """Its views change only with its rows."""
        return None

    def lens(self, subscription: Subscription) -> RowLens | None:
        """None: region views take the confirmed path alone (docs/concepts.md, "Two paths")."""
        return None

    # -- every mode -------------------------------------------------------------------

    def full_view(self, subscription: Subscription) -> Body:
        """The whole region from the active buffer."""
        return cut(as_region(subscription.view), subscription.shape, None, self.state.buffer)

    def complete_after(self, view: View, seq: int) -> int:
        """When the last ready primitive overlapping the view became ready."""
        region = as_region(view)
        ready = [
            p.ready_seq
            for p in self._parts.upstream.of(self.name)
            if p.ready
            and not isinstance(p.view, Entity)
            and planner.overlaps(as_region(p.view), region)
        ]
        return max(ready, default=seq)

    def step(self, subscription: Subscription, change: ChangeSet, held: Keys, steps: Steps) -> Step:
        """The rows of the change inside the region (``relay.core.changesets.step``)."""
        view = as_region(subscription.view)
        return shared_step(steps, change, view, subscription.shape, held, info=self.state.info)

    # -- epochs and housekeeping ------------------------------------------------------

    def after_swap(self, readers: Sequence[Subscription]) -> list[Primitive]:
        """Relative views whose entity moved may need more upstream (rule 3); subscribers
        sharing a view share its planning."""
        added: list[Primitive] = []
        followed: set[Relative] = set()
        for subscription in readers:
            view = subscription.view
            if isinstance(view, Relative) and view not in followed:
                followed.add(view)
                added += self._follow(view, entity=False)
        return added

    def housekeeping(self, now: float) -> list[Send]:
        """Release primitives no view needs (relative views count where they are now) for the
        grace period; prune the rows of released ones."""
        parts, state = self._parts, self.state
        prims = parts.upstream.of(self.name)
        views = parts.downstream.views(self.name)
        regions = [p for p in prims if not isinstance(p.view, Entity)]
        spare = {p.prim for p in planner.unneeded(regions, relative.needed(views, state))}
        spare |= relative.spare_entities(prims, views)
        released, sends = release_spare(parts.upstream, prims, spare, now, parts.policy.grace)
        for prim in released:
            if not isinstance(prim.view, Entity):
                state.released.append((as_region(prim.view), now))
        self._prune(now)
        return sends

    def _prune(self, now: float) -> None:
        """Drop rows inside recently released primitives and outside every held one.

        Batches already on their way when a release was sent may still carry rows of that
        primitive, so the area is pruned again at each housekeeping for ``PRUNE_WINDOW``.
        """
        state = self.state
        state.released = [(r, t) for r, t in state.released if now - t <= PRUNE_WINDOW]
        if not state.released or state.busy or state.buffer.shared >= 0:
            return  # busy: at the next housekeeping; shared: the leader's rows, not ours
        released = [region for region, _ in state.released]
        prims = self._parts.upstream.of(self.name)
        held = [as_region(p.view) for p in prims if not isinstance(p.view, Entity)]
        kept = [r for r in held if any(planner.overlaps(r, gone) for gone in released)]
        entities = [p.view.key for p in prims if isinstance(p.view, Entity)]
        state.buffer.delete_inside(released, kept, entities)

    def stats(self) -> dict[str, float]:
        """No counters of its own."""
        return {}

    # -- relays below -----------------------------------------------------------------

    def primitive(self, view: View) -> View:
        """A region (box, sphere, sector or union) of the dataset's dimensions, or an entity
        (the row of one key: a relay below following it for a relative view).

        Raises:
            InvalidView: another view, other dimensions, or a key not of the dataset's type.
        """
        info = self.state.info
        if isinstance(view, Entity):
            try:
                self.state.table.as_keys([view.key])
            except (TypeError, ValueError) as exc:
                raise InvalidView(f"entity {view.key!r} is no key of {info.name!r}: {exc}") from exc
            return view
        if not isinstance(view, _HELD):
            raise InvalidView(f"dataset {info.name!r} takes regions, not {type(view).__name__}")
        if view.dims != len(info.index_columns):
            raise InvalidView(
                f"dataset {info.name!r} is {len(info.index_columns)}-D, not {view.dims}-D"
            )
        return view

    def reach(self, rows: Mapping[str, Array]) -> Mapping[str, Array]:
        """A write changes the rows it names."""
        return rows

    def holds(self, prims: Sequence[View], rows: Mapping[str, Array]) -> Mask:
        """The rows inside any of the regions, and the rows of the entities."""
        return self.holder(rows)(prims)

    def holder(self, rows: Mapping[str, Array]) -> Callable[[Sequence[View]], Mask]:
        """``holds`` of ``rows`` for several sets of primitives (a batch cut for each relay
        below): the rows are binned by their first coordinate once, for every union of many
        regions asked of them, not sorted once a union (``BinnedPoints``)."""
        info = self.state.info
        index = tuple(info.index_columns)
        length = len(rows[info.key]) if rows else 0
        made: list[BinnedPoints | None] = []  # at the first union that bins them

        def holds(prims: Sequence[View]) -> Mask:
            regions = [view for view in prims if isinstance(view, _HELD)]
            mask = np.zeros(length, dtype=bool)
            if length and regions:
                union = _union(regions)
                if isinstance(union, RegionUnion) and len(union.members) >= SORTED_FROM:
                    if not made:
                        made.append(BinnedPoints.of(*(rows[name] for name in index)))
                    points = made[0]
                    if points is not None:
                        mask |= union.match_binned(points)
                    else:
                        mask |= members(union, rows, index)
                else:
                    mask |= members(union, rows, index)
            entities = [view.key for view in prims if isinstance(view, Entity)]
            if length and entities:
                mask |= np.isin(rows[info.key], self.state.table.as_keys(entities))
            return mask

        return holds

    def contents(self, prims: Sequence[View], table: Table | None = None) -> dict[str, Array]:
        """The rows any of the primitives holds; of the active state's regions through its grid
        index, without a scan of every row."""
        buffer = self.state.buffer
        regions = [view for view in prims if isinstance(view, _HELD)]
        if table is None and len(regions) == len(prims):
            if not regions:
                return buffer.active.take(np.zeros(0, np.intp))
            return buffer.active.take(buffer.query(_union(regions)))
        rows = buffer.active if table is None else table
        return rows.take(np.flatnonzero(self.holds(prims, rows.columns)))


#: The regions a primitive may be (an intersection is a subscriber's effective view, never a
#: primitive).
_HELD = (Box, Sphere, Sector, RegionUnion)


def _union(
    views: Sequence[Box | Sphere | Sector | RegionUnion],
) -> Box | Sphere | Sector | RegionUnion:
    """The union of one or more regions, as one view."""
    if len(views) == 1:
        return views[0]
    found: list[Box | Sphere | Sector] = []
    for view in views:
        found.extend(view.members if isinstance(view, RegionUnion) else (view,))
    return RegionUnion(tuple(found))


def _body_key(subscription: Subscription) -> Hashable:
    """What a push body depends on besides the active state (``pushes.Encodings``; inlined in
    ``RegionKind._cut_boxes``: keep both alike)."""
    held = subscription.held
    return (subscription.view, subscription.shape, None if held is None else held.signature())


SIDE = RelaySide(RegionKind)
"""Index ``space`` at the relay."""
