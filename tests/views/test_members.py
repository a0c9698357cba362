"""Which rows a view selects (views/members.py), against a brute-force oracle row by row."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.views.members import members
from fanout.views.objects import parse as path
from fanout.views.region import Box, Sphere
from fanout.views.sql import parse as sql
from fanout.views.topic import parse as topic

coords = st.integers(-5, 15).map(float)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(coords, coords), max_size=30))
def test_a_region_selects_the_rows_whose_coordinates_it_holds(points) -> None:
    box, ball = Box((0, 0), (10, 5)), Sphere((3.0, 3.0), 4.0)
    rows = {"x": np.array([p[0] for p in points]), "y": np.array([p[1] for p in points])}
    assert members(box, rows, ("x", "y")).tolist() == [
        0 <= x <= 10 and 0 <= y <= 5 for x, y in points
    ]
    assert members(ball, rows, ("x", "y")).tolist() == [
        math.dist((x, y), (3, 3)) <= 4 for x, y in points
    ]


LEVELS = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3).map("/".join)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(LEVELS, max_size=20),
    st.sampled_from(["a/+", "#", "a/#", "+/b/+", "c", "$share/g/a/#"]),
)
def test_a_topic_filter_selects_the_rows_of_the_topics_it_matches(topics, text) -> None:
    view = topic(text)
    rows = {"topic": np.array(topics, dtype=object), "value": np.zeros(len(topics))}
    assert members(view, rows, ("topic",)).tolist() == [view.matches(t) for t in topics]


PATHS = st.sampled_from(["/cars/c1", "/cars/c2", "/cars/old/c3", "/boats/b1", "/cars"])


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(PATHS, st.integers(0, 9), st.sampled_from(["on", "off"])), max_size=20),
    st.sampled_from(["/cars/.all", "/cars/c1", "/cars/.all?f=rpm>4", "/.all?f=state=on+rpm<2"]),
)
def test_an_object_path_selects_the_objects_in_scope_that_pass_a_filter(objects, text) -> None:
    view = path(text)
    rows = {
        "path": np.array([o[0] for o in objects], dtype=object),
        "rpm": np.array([o[1] for o in objects], dtype=np.int64),
        "state": np.array([o[2] for o in objects], dtype=object),
        "_version": np.zeros(len(objects), dtype=np.int64),  # internal: not an attribute
    }
    expected = [
        bool(view.match([p], [{"rpm": rpm, "state": state}])[0]) for p, rpm, state in objects
    ]
    assert members(view, rows, ("path",)).tolist() == expected


def test_views_that_do_not_select_rows_by_their_columns_are_refused() -> None:
    with pytest.raises(TypeError, match="Sql"):
        members(sql("SELECT * FROM t"), {"x": np.zeros(1)}, ("x",))  # type: ignore[arg-type]
    with pytest.raises(KeyError):
        members(Box((0, 0), (1, 1)), {"x": np.zeros(1)}, ("x", "y"))
