"""Priority from the data (CA 3197003 [0033], [0107], [0145]), sans I/O: rate tiers by distance
from a region view's focus, and a subscription's priority derived from its rows. Rules:

1. **Focus.** ``Relevance.focus``, else the view's centre; a relative view's entity (+ focus).
2. **Tiers.** An entity's tier is how many ``Tier.beyond`` its distance exceeds; tier 0 goes at
   every push. Push ``turn`` (0: the full push, then one more per cut) carries a changed entity
   of tier ``t >= 1`` only if ``tiers[t - 1].every`` divides ``turn``.
3. **Consistency.** Entered rows and left keys go at once, whatever their tier: the subscriber's
   keys are always the view's. A changed row not due is *stale* (``Held.stale``) and goes at its
   tier's next due push, changed since or not; a push whose turn every tier divides leaves the
   subscriber's copy equal to the plain view.
4. **Flushing.** A cut that leaves stale rows is cut again at the subscription's rate even with
   no new state (``relay.core.serving``), so they reach the subscriber without new data.
5. **Derived priority**, when a subscription becomes pending: ``changes`` adds log2(1 + rows of
   the view changed since its last push), ``nearest`` adds ``NEAREST * (1 - d / reach)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from fanout.errors import InvalidView
from fanout.relay.data.pushes import Held, cut_positions, entity_position, locate_anchor
from fanout.views.region import Box, Intersection, RegionUnion, Relative, Sector, Sphere
from fanout.wire.messages import DatasetInfo, Subscribe
from fanout.wire.options import Relevance

if TYPE_CHECKING:
    from fanout.relay.core.downstream import Subscription
    from fanout.relay.data.intake import DatasetState
    from fanout.relay.kinds.base import Cut
    from fanout.views.region import AbsoluteRegion

#: Rate tiers a subscription may ask for.
MAX_TIERS = 8
#: Pushes a tier's ``every`` may be at most.
MAX_EVERY = 1000
#: Priority a ``nearest`` subscription gains with an entity at its focus (rule 5): ten levels,
#: a second of waiting (``scheduler.AGING``).
NEAREST = 10.0

Point = tuple[float, ...]


def check(request: Subscribe, info: DatasetInfo) -> None:
    """Refuse a ``relevance`` the relay cannot apply to this subscription.

    Raises:
        InvalidView: not a region dataset, mode ``every``, a transducer named too, tiers not
            increasing or out of bounds, or a focus of other dimensions.
    """
    relevance = request.relevance
    if relevance is None:
        return
    if info.index != "space":
        raise InvalidView(
            f"relevance (priority from the data) measures distances in a region dataset;"
            f" {info.name!r} is indexed by {info.index!r}"
        )
    if request.mode != "latest":
        raise InvalidView("relevance is for mode 'latest': mode 'every' sends every change")
    if request.transduce is not None:
        raise InvalidView("relevance and transduce together: a transducer's input is every row")
    tiers = relevance.tiers
    if len(tiers) > MAX_TIERS:
        raise InvalidView(f"relevance: {len(tiers)} tiers, at most {MAX_TIERS}")
    beyond = [tier.beyond for tier in tiers]
    if not all(math.isfinite(b) and b > 0 for b in beyond) or beyond != sorted(set(beyond)):
        raise InvalidView(f"relevance: tiers' beyond {beyond} must be finite, > 0, increasing")
    if not all(1 <= tier.every <= MAX_EVERY for tier in tiers):
        raise InvalidView(f"relevance: a tier's every must be in [1, {MAX_EVERY}] pushes")
    focus = relevance.focus
    dims = len(info.index_columns)
    if focus is not None and (len(focus) != dims or not all(map(math.isfinite, focus))):
        raise InvalidView(f"relevance: focus {focus} must be {dims} finite coordinates")


def tiered(relevance: Relevance | None) -> bool:
    """Whether pushes of a subscription asking ``relevance`` are cut by tier."""
    return relevance is not None and bool(relevance.tiers)


def alone(subscription: Subscription) -> bool:
    """Whether ``subscription``'s push is cut by :func:`cut`, for it alone: it is tiered, or
    its subscriber holds rows held back (its tiers since dropped)."""
    held = subscription.held
    return tiered(subscription.asked.relevance) or (held is not None and held.stale is not None)


def tier_of(distances: npt.NDArray[np.float64], relevance: Relevance) -> npt.NDArray[np.intp]:
    """Each distance's tier (rule 2): how many tiers' ``beyond`` it exceeds."""
    beyond = np.array([tier.beyond for tier in relevance.tiers], dtype=np.float64)
    return np.searchsorted(beyond, distances, side="left")


def due(tiers: npt.NDArray[np.intp], relevance: Relevance, turn: int) -> npt.NDArray[np.bool_]:
    """Which entities of ``tiers`` push ``turn`` may carry (rule 2)."""
    every = np.array([1] + [tier.every for tier in relevance.tiers], dtype=np.int64)
    found: npt.NDArray[np.bool_] = turn % every[tiers] == 0
    return found


def focus_of(view: object, relevance: Relevance, state: DatasetState) -> Point | None:
    """The point distances are measured from now (rule 1); None: a relative view's entity is
    not held."""
    offset = relevance.focus
    if isinstance(view, Relative):
        at = entity_position(state.buffer, view.entity, state.info.index_columns)
        if at is None or offset is None:
            return at
        return tuple(a + o for a, o in zip(at, offset, strict=True))
    if offset is not None:
        return tuple(offset)
    return centre(view)


def centre(view: object) -> Point:
    """A region's centre: a sphere's or sector's own, else its bounding box's middle."""
    if isinstance(view, Sphere | Sector):
        return tuple(view.center)
    assert isinstance(view, Box | RegionUnion | Intersection)
    box = view if isinstance(view, Box) else view.bounds()
    return tuple((lo + hi) / 2 for lo, hi in zip(box.lo, box.hi, strict=True))


def distances(
    state: DatasetState, positions: npt.NDArray[np.intp], focus: Point
) -> npt.NDArray[np.float64]:
    """Each active row at ``positions``' distance from ``focus`` (the index coordinates)."""
    table = state.buffer.active
    total = np.zeros(len(positions), dtype=np.float64)
    for name, at in zip(state.info.index_columns, focus, strict=True):
        total += (table.column(name)[positions].astype(np.float64) - at) ** 2
    return np.sqrt(total)


def cut(subscription: Subscription, region: AbsoluteRegion, state: DatasetState) -> Cut:
    """The tiered push of ``region`` (``subscription``'s view where it is now) and what its
    subscriber holds after it (rules 2-3; untiered, the rows held back go now).

    Raises:
        EntityNotHeld: a ``relative_to`` transform's entity is not in the active buffer.
    """
    relevance = subscription.asked.relevance
    buffer, held = state.buffer, subscription.held
    anchor = locate_anchor(subscription.shape, buffer)
    positions = buffer.query(region)
    turn = 0 if held is None else held.turn + 1
    focus = None if relevance is None else focus_of(subscription.view, relevance, state)
    if relevance is None or not relevance.tiers or focus is None:
        mask = np.ones(len(positions), dtype=bool)  # (a located relative view has a focus)
    else:
        mask = due(tier_of(distances(state, positions, focus), relevance), relevance, turn)
    body = cut_positions(positions, subscription.shape, held, buffer, anchor, due=mask)
    stamp = buffer.stamp
    assert stamp is not None
    after = Held(
        subscription.view,
        buffer.generation,
        stamp.epoch,
        stamp.seq,
        body.keys,
        body.anchor,
        stale=body.stale,
        turn=turn,
    )
    return body, after


def priority(subscription: Subscription, region: AbsoluteRegion, state: DatasetState) -> float:
    """The subscription's priority from its rows now (rule 5), or its given priority."""
    relevance = subscription.asked.relevance
    given = float(subscription.priority)
    if relevance is None or relevance.priority_from == "given":
        return given
    positions = state.buffer.query(region)
    if relevance.priority_from == "changes":
        return given + math.log2(1 + _changed(subscription.held, state, positions))
    focus = focus_of(subscription.view, relevance, state)
    view = subscription.view
    if isinstance(view, Relative):  # its own entity is always at the focus: not a neighbour
        table = state.buffer.active
        (own,) = table.locate(table.as_keys([view.entity]))
        positions = positions[positions != own]
    if focus is None or not len(positions):
        return given
    nearest = float(distances(state, positions, focus).min())
    reach = _reach(region, focus)
    return given + NEAREST * max(0.0, 1.0 - nearest / reach) if reach > 0 else given


def _changed(held: Held | None, state: DatasetState, positions: npt.NDArray[np.intp]) -> int:
    """Rows at ``positions`` changed since ``held`` (all of them: nothing held), stale ones too."""
    if held is None:
        return len(positions)
    table = state.buffer.active
    changed = table.changed[positions] > held.seq
    if held.stale is not None:
        changed |= np.isin(table.keys[positions], held.stale)
    return int(np.count_nonzero(changed))


def _reach(region: AbsoluteRegion, focus: Sequence[float]) -> float:
    """The distance from ``focus`` to the farthest corner of the region's bounding box."""
    box = region.bounds()
    return math.sqrt(
        sum(
            max(abs(lo - at), abs(hi - at)) ** 2
            for lo, hi, at in zip(box.lo, box.hi, focus, strict=True)
        )
    )
