"""Hypothesis strategies for views (testing/strategies.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from fanout.testing import strategies as fs
from fanout.views import Box, Sphere
from fanout.views.region import RegionUnion, Sector


@given(st.sampled_from([2, 3]).flatmap(lambda dims: st.tuples(st.just(dims), fs.primitives(dims))))
def test_primitives_have_the_dimensions_asked_for(drawn: tuple[int, Box | Sphere | Sector]) -> None:
    dims, shape = drawn
    assert shape.dims == dims
    assert isinstance(shape, Box | Sphere | Sector)


@given(fs.boxes(2, coords=st.just(1.0), sizes=st.just(2.0)))
def test_boxes_draw_from_the_ranges_given(box: Box) -> None:
    assert box == Box((1.0, 1.0), (3.0, 3.0))


@given(fs.regions(2, max_members=3))
def test_regions_are_one_primitive_or_a_union_of_a_few(region: object) -> None:
    if isinstance(region, RegionUnion):
        assert 2 <= len(region.members) <= 3
    else:
        assert isinstance(region, Box | Sphere | Sector)


@given(st.data())
def test_a_tiling_covers_its_box_exactly(data: st.DataObject) -> None:
    box = data.draw(fs.boxes(2))
    pieces = data.draw(fs.tiling(box, data.draw(st.integers(0, 5))))
    area = float(np.prod(np.subtract(box.hi, box.lo)))
    parts = sum(float(np.prod(np.subtract(piece.hi, piece.lo))) for piece in pieces)
    assert np.isclose(parts, area, atol=1e-9)
    assert all(box.lo[a] <= p.lo[a] <= p.hi[a] <= box.hi[a] for p in pieces for a in range(2))


@given(fs.sectors(3, elevations=st.just(0.3)))
def test_sectors_in_3d_are_headed_by_azimuth_and_elevation(sector: Sector) -> None:
    assert sector.dims == 3
    assert isinstance(sector.heading, tuple)
    assert sector.heading[1] == 0.3


@given(fs.grid_boxes(4), fs.grid_discs(4, max_radius=2))
def test_grid_shapes_lie_on_the_integer_grid(box: Box, disc: Sphere) -> None:
    assert all(float(v).is_integer() and 0 <= v <= 4 for v in (*box.lo, *box.hi))
    assert all(float(v).is_integer() and 0 <= v <= 4 for v in disc.center)
    assert disc.radius in (1, 2)
