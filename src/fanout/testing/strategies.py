"""Hypothesis strategies for views: boxes, spheres, sectors, their unions, and tilings.

Needs Hypothesis (a dev dependency), so ``fanout.testing`` does not import this module: a test
does, ``from fanout.testing import strategies as fs``. Each strategy takes the ranges it draws
from, so that a test keeps the ones its property needs (small integers that make edges meet,
huge floats that make them overflow); the defaults are a 2-D world of about 40 units.

- ``boxes``, ``spheres``, ``sectors``: one shape of ``dims`` dimensions; ``primitives``: any of
  them; ``regions``: one primitive or a ``RegionUnion`` of up to ``max_members``.
- ``grid_boxes``, ``grid_discs``: 2-D boxes and discs on a small integer grid.
- ``tiling``: a box cut into pieces by random guillotine cuts (pieces that cover it exactly).
"""

from __future__ import annotations

import math

from hypothesis import strategies as st

from fanout.views import Box, Sphere
from fanout.views.region import RegionUnion, Sector

Floats = st.SearchStrategy[float]

#: Coordinates: small integers (edges that meet) or floats rounded to 9 places (distances that
#: underflow, 1e-175 squared is 0, are not geometry).
COORDS = st.integers(-20, 20).map(float) | st.floats(-20, 20).map(lambda v: round(v, 9))
#: Side lengths and radii, from nothing to 16.
SIZES = st.integers(0, 16).map(float) | st.floats(0, 16).map(lambda v: round(v, 9))
#: A sector's heading (its azimuth in 3-D), in radians.
HEADINGS = st.floats(-math.pi, math.pi)
#: A 3-D sector's elevation, in radians.
ELEVATIONS = st.floats(-1.5, 1.5)
#: A sector's half-angle: the usual ones, or any from nearly none to a whole sphere.
HALF_ANGLES = st.sampled_from([math.pi / 6, math.pi / 4, math.pi / 2, 2.0, math.pi]) | st.floats(
    0.05, math.pi
)


def boxes(dims: int, *, coords: Floats = COORDS, sizes: Floats = SIZES) -> st.SearchStrategy[Box]:
    """Boxes from a corner in ``coords``, each side a length from ``sizes``."""
    corners = st.tuples(*[coords] * dims)
    sides = st.tuples(*[sizes] * dims)
    return st.builds(
        lambda lo, side: Box(lo, tuple(v + s for v, s in zip(lo, side, strict=True))),
        corners,
        sides,
    )


def spheres(
    dims: int, *, coords: Floats = COORDS, radii: Floats = SIZES
) -> st.SearchStrategy[Sphere]:
    """Spheres (discs in 2-D) centred in ``coords``."""
    return st.builds(Sphere, st.tuples(*[coords] * dims), radii)


def sectors(
    dims: int,
    *,
    coords: Floats = COORDS,
    radii: Floats = SIZES,
    headings: Floats = HEADINGS,
    elevations: Floats = ELEVATIONS,
    half_angles: Floats = HALF_ANGLES,
) -> st.SearchStrategy[Sector]:
    """Sectors (cones in 3-D, headed by azimuth and elevation) centred in ``coords``."""
    heading: st.SearchStrategy[float | tuple[float, float]] = (
        headings if dims == 2 else st.tuples(headings, elevations)
    )
    centres = st.tuples(*[coords] * dims)
    return st.builds(Sector, centres, radii, heading, half_angles)


def primitives(
    dims: int,
    *,
    coords: Floats = COORDS,
    sizes: Floats = SIZES,
    headings: Floats = HEADINGS,
    elevations: Floats = ELEVATIONS,
    half_angles: Floats = HALF_ANGLES,
) -> st.SearchStrategy[Box | Sphere | Sector]:
    """A box, a sphere or a sector, each as likely, from the same ranges."""
    return st.one_of(
        boxes(dims, coords=coords, sizes=sizes),
        spheres(dims, coords=coords, radii=sizes),
        sectors(
            dims,
            coords=coords,
            radii=sizes,
            headings=headings,
            elevations=elevations,
            half_angles=half_angles,
        ),
    )


def regions(
    dims: int, members: st.SearchStrategy[Box | Sphere | Sector] | None = None, max_members: int = 3
) -> st.SearchStrategy[Box | Sphere | Sector | RegionUnion]:
    """One of ``members`` (``primitives(dims)`` by default), or a union of up to
    ``max_members`` of them."""
    shapes = primitives(dims) if members is None else members
    drawn = st.lists(shapes, min_size=1, max_size=max_members)
    return drawn.map(lambda found: found[0] if len(found) == 1 else RegionUnion(tuple(found)))


@st.composite
def tiling(draw: st.DrawFn, box: Box, cuts: int) -> list[Box]:
    """``box`` cut into ``cuts + 1`` pieces by random guillotine cuts."""
    pieces = [(list(box.lo), list(box.hi))]
    for _ in range(cuts):
        lo, hi = pieces.pop(draw(st.integers(0, len(pieces) - 1)))
        axis = draw(st.integers(0, box.dims - 1))
        cut = draw(st.floats(lo[axis], hi[axis]))
        pieces.append((lo, [*hi[:axis], cut, *hi[axis + 1 :]]))
        pieces.append(([*lo[:axis], cut, *lo[axis + 1 :]], hi))
    return [Box(tuple(lo), tuple(hi)) for lo, hi in pieces]


@st.composite
def grid_boxes(draw: st.DrawFn, high: int, low: int = 0) -> Box:
    """2-D boxes whose corners lie on the integers ``low..high``: edges that meet and flat boxes
    come up often, and a test's oracle can check a grid of points between them."""
    coords = st.integers(low, high)
    x0, x1 = sorted((draw(coords), draw(coords)))
    y0, y1 = sorted((draw(coords), draw(coords)))
    return Box((x0, y0), (x1, y1))


def grid_discs(high: int, max_radius: int, low: int = 0) -> st.SearchStrategy[Sphere]:
    """Discs centred on the integers ``low..high``, of a whole radius from 1 to
    ``max_radius``."""
    coords = st.integers(low, high)
    return st.builds(lambda x, y, r: Sphere((x, y), r), coords, coords, st.integers(1, max_radius))
