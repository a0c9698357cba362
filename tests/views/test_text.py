"""The text syntax of views: parsing, printing back, and errors that point at the problem."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.errors import InvalidView
from fanout.testing import strategies as fs
from fanout.views.objects import ObjectPath
from fanout.views.region import Box, RegionUnion, Relative, Sector, Sphere
from fanout.views.sql import Sql
from fanout.views.text import parse, parse_region, to_text
from fanout.views.topic import TopicFilter

NUMBER = st.floats(-1e6, 1e6, allow_nan=False) | st.integers(-1000, 1000).map(float)
SIZE = st.floats(0, 1e6) | st.integers(0, 1000).map(float)
ANGLE = st.floats(-10, 10)
HALF = st.floats(1e-6, math.pi)


@st.composite
def regions(draw: st.DrawFn) -> Box | Sphere | Sector | RegionUnion | Relative:
    dims = draw(st.sampled_from([2, 3]))
    shapes = fs.primitives(
        dims, coords=NUMBER, sizes=SIZE, headings=ANGLE, elevations=ANGLE, half_angles=HALF
    )
    absolute = draw(fs.regions(dims, shapes, max_members=3))
    if not draw(st.booleans()):
        return absolute
    entity = draw(st.integers(-(2**70), 2**70) | st.text(min_size=1))
    return Relative(entity, absolute)


@pytest.mark.parametrize(
    ("text", "view"),
    [
        ("box:0,0,10,10", Box([0, 0], [10, 10])),
        ("box:0,0,0,10,10,10", Box([0, 0, 0], [10, 10, 10])),
        ("sphere:5,5,3", Sphere([5, 5], 3)),
        ("sphere:1,2,3,4", Sphere([1, 2, 3], 4)),
        ("sector:0,0,10,0.5,0.3", Sector([0, 0], 10, 0.5, 0.3)),
        ("sector:0,0,0,10,0.5,-0.2,1", Sector([0, 0, 0], 10, (0.5, -0.2), 1)),
        ("box:0,0,1,1|sphere:5,5,1", RegionUnion([Box([0, 0], [1, 1]), Sphere([5, 5], 1)])),
        ("rel:42:sphere:0,0,50", Relative(42, Sphere([0, 0], 50))),
        ("rel:ship-7:box:-1,-1,1,1", Relative("ship-7", Box([-1, -1], [1, 1]))),
        ('rel:"42":sphere:0,0,1', Relative("42", Sphere([0, 0], 1))),
        (" box: 0 , 0 ,1e1, +10.5 | box:.5,-2.,3,4 ", None),
    ],
)
def test_parse_reads_each_shape(text: str, view: object) -> None:
    parsed = parse_region(text)
    if view is None:
        assert parsed == RegionUnion([Box([0, 0], [10, 10.5]), Box([0.5, -2], [3, 4])])
    else:
        assert parsed == view
        assert parse(text, "region") == view


def test_str_writes_the_shortest_exact_numbers() -> None:
    assert str(Box([0, 0], [10, 10])) == "box:0,0,10,10"
    assert str(Sphere([0.1, -2.5], 1e20)) == "sphere:0.1,-2.5,1e+20"
    assert str(Relative("a b", Sphere([0, 0], 1))) == 'rel:"a b":sphere:0,0,1'
    assert str(Relative(7, Box([0, 0], [1, 1]))) == "rel:7:box:0,0,1,1"


@settings(max_examples=300, deadline=None)
@given(regions())
def test_text_round_trips(view: Box | Sphere | Sector | RegionUnion | Relative) -> None:
    text = str(view)
    assert parse_region(text) == view
    assert to_text(view) == text


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("", ["expected box, sphere or sector", "end of the text", "column 1"]),
        ("boxx:0,0,1,1", ["found 'boxx'", "column 1"]),
        ("box:0,abc,10,10", ["expected a number", "'abc'", "column 7"]),
        ("box:0,0,10", ["box takes 4 numbers (2-D) or 6 (3-D), got 3", "column 1"]),
        ("box 0,0,1,1", ["expected ':'", "column 4"]),
        ("box:0,0,1,1 x", ["unexpected 'x'", "column 13"]),
        ("box:0,0,1,1|", ["expected box, sphere or sector", "column 13"]),
        ("box:0,0,1,1|cube:0", ["found 'cube'", "column 13"]),
        ("box:5,0,1,1", ["lo[0] = 5.0 is greater than hi[0]", "the box at column 1"]),
        ("box:0,0,1,1|sphere:0,0,-1", ["radius = -1.0", "the sphere at column 13"]),
        ("box:0,0,1,1|sphere:0,0,0,1", ["member 1 is 3-D", "column 1"]),
        ("sector:0,0,1,0,4", ["half_angle = 4.0", "the sector at column 1"]),
        ("sphere:0,0,nan", ["expected a number", "'nan'", "column 12"]),
        ("sphere:0,0,1e999", ["radius = inf", "not finite"]),
        ("rel::box:0,0,1,1", ["expected an entity key", "column 5"]),
        ("rel:42box:0,0,1,1", ["expected box, sphere or sector, found '0'", "column 11"]),
        ('rel:"ab:box:0,0,1,1', ["bad quoted entity key", "column 5"]),
        ("rel:42:rel:1:box:0,0,1,1", ["found 'rel'", "column 8"]),
    ],
)
def test_errors_name_the_token_and_its_column(text: str, fragments: list[str]) -> None:
    with pytest.raises(InvalidView) as caught:
        parse_region(text)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_parse_picks_the_kind() -> None:
    assert parse("sensors/+/temp", "topic") == TopicFilter("sensors/+/temp")
    assert parse("/pps/media/.all", "path") == ObjectPath("/pps/media/.all")
    assert isinstance(parse("SELECT * FROM t WHERE x < 5", "sql"), Sql)
    with pytest.raises(InvalidView, match="unknown view kind 'regions'"):
        parse("box:0,0,1,1", "regions")
    with pytest.raises(InvalidView, match="must be a string"):
        parse_region(42)  # type: ignore[arg-type]


def test_to_text_writes_every_kind_back() -> None:
    for text, kind in [
        ("sensors/+/temp", "topic"),
        ("/pps/media/.all", "path"),
        ("box:0,0,0,1,1,1|sector:0,0,0,1,0,0,1", "region"),
    ]:
        assert to_text(parse(text, kind)) == text
    query = parse("select *   from t where x < 5", "sql")
    assert parse(to_text(query), "sql") == query
