"""Coverage planning: what to subscribe upstream for, and what to let go.

Founding document 000, [0078]-[0083] and [0155].

On every subscribe or view change the relay asks whether its upstream primitives already cover the
view (step S430). If not, it acquires more (S440), widened by policy so that the next small move of
the view, or a neighbour's view, is already covered ([0083]): ``tiles`` (the default), ``margin``,
``exact``, ``enclose`` (with an ``overshoot``) or ``fit`` (:func:`fitted`), all but ``exact`` and
``fit`` grown further ahead of a moving view's motion by ``lead`` seconds (:func:`velocity`).
Primitives whose every dependent view is covered by the others are released after a grace period.
What each policy acquires and why: docs/concepts.md, "Coverage".
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from fanout.errors import InvalidView
from fanout.relay.core.upstream import Primitive
from fanout.relay.data.boxes import Boxes
from fanout.views import CoverIndex, View, bounding_box, covers, residual
from fanout.views.region import Box, Intersection, RegionUnion, Sector, Sphere

Region = Box | Sphere | Sector | RegionUnion | Intersection
_REGIONS = (
    Box,
    Sphere,
    Sector,
    RegionUnion,
    Intersection,
)  # as a tuple: isinstance checks it faster


def as_region(view: object) -> Region:
    """``view`` as an absolute region.

    Raises:
        InvalidView: it is not one (a relative view must be resolved first).
    """
    if not isinstance(view, _REGIONS):
        raise InvalidView(f"expected a region view, got {type(view).__name__}")
    return view


#: The widening policies (see the module docstring).
WIDENINGS = ("tiles", "margin", "exact", "enclose", "fit")


@dataclass(frozen=True)
class Policy:
    """How generously the relay widens what it asks for.

    Attributes:
        widen: ``tiles``, ``margin``, ``exact``, ``enclose`` or ``fit`` (see the module
            docstring).
        margin: grow each axis of the view's bounding box by this fraction of its extent first;
            with ``fit``, the most a side is stretched, as a fraction of the view's extent.
        min_margin: and by at least this many world units.
        grace: seconds an unneeded primitive is kept before it is released.
        max_overfetch: tiles whose total area (volume) exceeds this many times the grown view's
            are not worth it (a long thin view, say): the grown view is acquired instead.
        lead: seconds of a moving view's motion to acquire ahead of it (0: none).
        overshoot: ``enclose`` only: a side of the enclosure that has to grow grows by this
            many times more than it has to (0: just enough).
    """

    widen: Literal["tiles", "margin", "exact", "enclose", "fit"] = "tiles"
    margin: float = 0.5
    min_margin: float = 0.0
    grace: float = 10.0
    max_overfetch: float = 16.0
    lead: float = 0.0
    overshoot: float = 0.0

    def __post_init__(self) -> None:
        if self.widen not in WIDENINGS:
            raise InvalidView(f"policy: widen={self.widen!r} must be one of {', '.join(WIDENINGS)}")
        values = (self.margin, self.min_margin, self.grace, self.lead, self.overshoot)
        if min(values) < 0 or not all(map(math.isfinite, values)) or self.max_overfetch < 1:
            raise InvalidView(
                "policy: margin, min_margin, grace, lead and overshoot must be finite and >= 0,"
                " max_overfetch >= 1"
            )
        if self.overshoot and self.widen != "enclose":
            raise InvalidView(f"policy: overshoot is for enclose widening, not {self.widen}")

    def describe(self) -> str:
        """E.g. ``"fit widening, margin 0.075"``: what a relay logs when it starts."""
        told = [f"{self.widen} widening", f"margin {self.margin:g}"]
        told += [f"overshoot {self.overshoot:g}"] if self.overshoot else []
        told += [f"lead {self.lead:g} s"] if self.lead else []
        return ", ".join(told)


#: The widening of a relay in a map of responsibility unless it is told otherwise
#: (``RelayConfig.planning``): the map gathers the views of one place at one relay, and ``fit``
#: fetches little more than their union while guessing where the next one will be
#: (docs/cluster.md, "Widening in a cluster").
IN_A_MAP = Policy(widen="fit", margin=0.075)


Velocity = tuple[float, ...]
"""World units per second, one per axis."""

#: A move longer than this many times the view's largest extent is a jump, not motion.
MAX_JUMP = 4.0


def grown(view: Region, policy: Policy, moving: Velocity | None = None) -> Box:
    """The view's bounding box, each axis grown by the margin (a fraction of that axis' extent)
    and, for a view ``moving`` at that velocity, by ``policy.lead`` seconds of its motion on the
    side it moves towards."""
    bounds = view.bounds()
    pads = [
        max(policy.min_margin, policy.margin * (hi - lo))
        for lo, hi in zip(bounds.lo, bounds.hi, strict=True)
    ]
    ahead = [speed * policy.lead for speed in moving] if moving else [0.0] * len(pads)
    return Box(
        tuple(
            _finite(lo - pad + min(step, 0.0), lo)
            for lo, pad, step in zip(bounds.lo, pads, ahead, strict=True)
        ),
        tuple(
            _finite(hi + pad + max(step, 0.0), hi)
            for hi, pad, step in zip(bounds.hi, pads, ahead, strict=True)
        ),
    )


def _finite(value: float, otherwise: float) -> float:
    """``value``, or ``otherwise`` when it is not finite (a huge view grown past the largest
    floats is not grown on that side)."""
    return value if math.isfinite(value) else otherwise


def velocity(before: View, after: View, seconds: float) -> Velocity | None:
    """How fast a view moved from ``before`` to ``after`` in ``seconds`` (its centre's move).

    None when it cannot tell: either is not an absolute region, their dimensions differ, no
    time passed, or the move is a jump (more than ``MAX_JUMP`` times the view's extent).
    """
    regions = Box | Sphere | Sector | RegionUnion | Intersection
    if not (isinstance(before, regions) and isinstance(after, regions)) or seconds <= 0:
        return None
    old, new = before.bounds(), after.bounds()
    if old.dims != new.dims:
        return None
    move = [
        (n_lo + n_hi - o_lo - o_hi) / 2
        for o_lo, o_hi, n_lo, n_hi in zip(old.lo, old.hi, new.lo, new.hi, strict=True)
    ]
    if math.hypot(*move) > MAX_JUMP * max(_extent(new), 1e-9):
        return None
    return tuple(step / seconds for step in move)


def tile_side(view: Region) -> float | None:
    """The tile side for ``view``: the smallest power of two at least twice its largest extent
    (None for a view too large to tile: that power of two is beyond floating point)."""
    extent = max(_extent(view.bounds()), 1e-9)
    exponent = math.ceil(math.log2(2.0 * extent)) if math.isfinite(2.0 * extent) else 1024
    return float(2.0**exponent) if exponent < 1024 else None


def tileable(box: Box, side: float) -> bool:
    """Whether ``box``'s tiles of ``side`` and their sizes are all finite floats (a box near
    the largest floats is not, and is acquired as it is instead)."""
    if math.log2(side) * box.dims >= 1000:  # side ** dims would overflow
        return False
    return all(
        math.isfinite(c / side) and math.isfinite(abs(c) + 2.0 * side) for c in (*box.lo, *box.hi)
    )


def tiles(box: Box, side: float) -> list[Box]:
    """The grid tiles of ``side`` that ``box`` touches (``tileable(box, side)`` must hold)."""
    ranges = [
        range(_first_tile(lo, side), math.floor(hi / side) + 1)
        for lo, hi in zip(box.lo, box.hi, strict=True)
    ]
    return [_tile(side, cell) for cell in itertools.product(*ranges)]


def _first_tile(lo: float, side: float) -> int:
    """The index of the tile holding ``lo``: ``floor(lo / side)``, unless the division
    underflowed (a tiny negative ``lo`` gives -0.0, whose tile starts above ``lo``)."""
    first = math.floor(lo / side)
    return first - 1 if first * side > lo else first


@functools.lru_cache(maxsize=1 << 16)
def _tile(side: float, cell: tuple[int, ...]) -> Box:
    """The tile of ``side`` at grid ``cell`` (remembered: views moving about ask for the same
    tiles over and over, and a box is checked as it is made)."""
    return Box(tuple(i * side for i in cell), tuple((i + 1) * side for i in cell))


def to_acquire(
    held: CoverIndex | Sequence[View],
    view: Region,
    policy: Policy,
    moving: Velocity | None = None,
    views: Sequence[View] = (),
) -> list[Region]:
    """New primitives needed so that ``held`` plus them covers ``view`` (empty if covered).

    Args:
        held: what is held upstream; the relay passes its cover index (fast), tests may pass a
            list.
        view: the view to cover.
        policy: how to widen.
        moving: the view's velocity, if it is moving (see ``velocity``; used with a ``lead``).
        views: ``fit`` only: the views the relay serves from the dataset (others are ignored).
    """
    if not isinstance(held, CoverIndex):
        held = CoverIndex(held)
    if (policy.widen == "tiles" and _tiles_held(held, view)) or covers(held, view):
        return []
    if policy.widen == "exact":
        return [as_region(piece) for piece in residual(held, view)]
    if policy.widen == "fit":
        return [fitted(held, view, views, policy.margin)]
    wanted = grown(view, policy, moving)
    if policy.widen == "enclose":
        meeting = [prim for prim in held if overlaps(prim, wanted)]
        return [enclosure(bounding_box(meeting), wanted, policy.overshoot) if meeting else wanted]
    side = tile_side(view) if policy.widen == "tiles" else None
    if side is not None and tileable(wanted, side):
        candidates = tiles(wanted, side)
        if len(candidates) * side**wanted.dims <= policy.max_overfetch * max(
            wanted.measure(), 1e-300
        ):
            return [tile for tile in candidates if not covers(held, tile)]
    return [wanted]


def _tiles_held(held: CoverIndex, view: Region) -> bool:
    """Whether every tile of ``view``'s own tile grid that it touches is held: a sufficient test
    for coverage that a view moving among tiles acquired for it passes with a few lookups."""
    if not isinstance(view, Box):
        return False
    side = tile_side(view)
    if side is None or not tileable(view, side):
        return False
    return all(tile in held for tile in tiles(view, side))


def enclosure(held: Box, wanted: Box, overshoot: float) -> Box:
    """The bounding box of ``held`` and ``wanted``, each side that grows beyond ``held`` pushed
    out by ``overshoot`` times its growth more."""
    lo = tuple(
        _finite(min(h, w) - overshoot * max(h - w, 0.0), min(h, w))
        for h, w in zip(held.lo, wanted.lo, strict=True)
    )
    hi = tuple(
        _finite(max(h, w) + overshoot * max(w - h, 0.0), max(h, w))
        for h, w in zip(held.hi, wanted.hi, strict=True)
    )
    return Box(lo, hi)


def fitted(held: Iterable[View], view: Region, views: Sequence[View], most: float) -> Box:
    """The primitive ``fit`` widening acquires for ``view`` (see the module docstring).

    Args:
        held: the held primitives (region ones count).
        view: the view to cover.
        views: the views served; region views of ``view``'s dimensions count, others not.
        most: a side is stretched by at most this fraction of ``view``'s extent on its axis.

    Returns:
        The bounding box of the views meeting ``view`` or the held primitives meeting it
        (``view`` among them), each side stretched by the box's extent over ``n - 1`` (``n``:
        those views, distinct ones), at most ``most`` times ``view``'s extent. The held
        primitives only find the views: what they held beyond them is not kept.
    """
    own = view.bounds()
    near = [own, *(p.bounds() for p in held if isinstance(p, _REGIONS) and overlaps(p, own))]
    members = {
        other
        for other in views
        if isinstance(other, _REGIONS)
        and other.dims == own.dims
        and any(overlaps(other, box) for box in near)
    }
    members.add(view)
    box = bounding_box(members)
    spread = max(len(members) - 1, 1)
    stretch = [
        min((hi - lo) / spread, most * (view_hi - view_lo))
        for lo, hi, view_lo, view_hi in zip(box.lo, box.hi, own.lo, own.hi, strict=True)
    ]
    return Box(
        tuple(_finite(lo - s, lo) for lo, s in zip(box.lo, stretch, strict=True)),
        tuple(_finite(hi + s, hi) for hi, s in zip(box.hi, stretch, strict=True)),
    )


def overlaps(a: Region, b: Region) -> bool:
    """Whether the bounding boxes of two regions meet (a cheap necessary test for overlap)."""
    box_a, box_b = a.bounds(), b.bounds()
    return all(
        lo_a <= hi_b and lo_b <= hi_a
        for lo_a, hi_a, lo_b, hi_b in zip(box_a.lo, box_a.hi, box_b.lo, box_b.hi, strict=True)
    )


def unneeded(prims: Sequence[Primitive], views: Sequence[Region]) -> list[Primitive]:
    """Primitives that can go: every view they touch stays covered by the remaining ready ones.

    Oldest primitives are considered first, so a view that moved on lets go of where it was. A
    primitive whose interior no other ready primitive overlaps is kept whenever a view touches
    it, without asking the coverage algebra (with shared tiles that is almost every primitive,
    which keeps this pass cheap with thousands of views). Which boxes meet which is found by a
    sweep (``relay.data.boxes``), not by testing every view against every primitive: the
    relay's housekeeping runs this twice a second over all its views.
    """
    order = sorted(prims, key=lambda p: p.prim)
    bounds = [as_region(p.view).bounds() for p in order]
    boxes = Boxes(bounds)
    touching = Boxes([view.bounds() for view in views])
    touched = touching.any_meeting(boxes)
    ready = [p for p in prims if p.ready]
    others = Boxes([as_region(p.view).bounds() for p in ready])
    alive = np.ones(len(ready), dtype=bool)
    slot = {p.prim: i for i, p in enumerate(ready)}
    crowded = _crowded(others, boxes, np.array([slot.get(p.prim, -1) for p in order]))
    index: CoverIndex | None = None  # the alive ready primitives, built when first needed
    gone: list[Primitive] = []
    for at, (prim, is_touched) in enumerate(zip(order, touched.tolist(), strict=True)):
        box = bounds[at]
        mine = slot.get(prim.prim)
        if is_touched:
            if not crowded[at]:
                continue  # needed: no other primitive could cover what it serves
            overlapping = others.meeting(box, interior=True)
            overlapping = overlapping[alive[overlapping] & (overlapping != mine)]
            if not len(overlapping):
                continue
        if index is None:
            index = CoverIndex(p.view for p, keep in zip(ready, alive, strict=True) if keep)
        if mine is not None:
            alive[mine] = False
            index.remove(prim.view)
        near = [views[int(i)] for i in touching.meeting(box)] if is_touched else []
        if all(covers(index, view) for view in near):
            gone.append(prim)
        elif mine is not None:
            alive[mine] = True
            index.add(prim.view)
    return gone


def _crowded(others: Boxes, boxes: Boxes, own: npt.NDArray[np.intp]) -> npt.NDArray[np.bool_]:
    """For each of ``boxes`` (positions given), whether one of ``others`` other than its own
    (``own``: its position among them, or -1) shares interior with it."""
    found = np.zeros(len(boxes), dtype=bool)
    for mine, theirs in others.pairs(boxes, interior=True):
        other, box = others.order[mine], boxes.order[theirs]
        found[box[other != own[box]]] = True
    return found


def _extent(box: Box) -> float:
    return max(high - low for low, high in zip(box.lo, box.hi, strict=True))
