"""PPS object paths: parsing, matching, and coverage checked by brute force over small worlds."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.errors import InvalidView
from fanout.views.base import ViewBase
from fanout.views.objects import AttributeFilter, ObjectPath, covers, parse, residual

# --- parsing ----------------------------------------------------------------------------------


def test_parse_object() -> None:
    view = parse("/pps/media/PlayCurrent")
    assert (view.directory, view.object, view.all) == ("/pps/media", "PlayCurrent", False)
    assert (view.delta, view.attributes, view.filters) == (False, None, ())
    assert view.object_path == "/pps/media/PlayCurrent"


def test_parse_all_with_wait_and_deltadir() -> None:
    view = parse("/pps/media/.all?wait,deltadir")
    assert (view.directory, view.object, view.all) == ("/pps/media", None, True)
    assert view.wait and view.deltadir and not view.delta


def test_parse_root_objects() -> None:
    assert (parse("/obj").directory, parse("/obj").object) == ("/", "obj")
    assert (parse("/.all").directory, parse("/.all").all) == ("/", True)


def test_parse_attribute_selection() -> None:
    view = parse("/pps/objname?delta,f=attr1+attr2")
    assert view.delta
    assert view.attributes == {"attr1", "attr2"}
    assert view.filters == ()


def test_parse_value_filters() -> None:
    view = parse("/pps/objname?delta,f=attr1<37")
    assert view.attributes is None
    assert view.filters == (AttributeFilter("attr1", "<", 37),)
    either = parse("/pps/objname?f=attr2<0+attr2>100")
    assert either.filters == (AttributeFilter("attr2", "<", 0), AttributeFilter("attr2", ">", 100))


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("t>=2", AttributeFilter("t", ">=", 2)),
        ("t<=-2", AttributeFilter("t", "<=", -2)),
        ("t==5", AttributeFilter("t", "=", 5)),
        ("name=foo", AttributeFilter("name", "=", "foo")),
        ("name!=x", AttributeFilter("name", "!=", "x")),
        ("s=a\\+b", AttributeFilter("s", "=", "a+b")),
        ("s=a\\\\", AttributeFilter("s", "=", "a\\")),
        ("s=", AttributeFilter("s", "=", "")),
        ("big=99999999999999999999", AttributeFilter("big", "=", "99999999999999999999")),
        ("_x.y=1", AttributeFilter("_x.y", "=", 1)),
    ],
)
def test_parse_one_comparison(spec: str, expected: AttributeFilter) -> None:
    view = parse(f"/d/x?f={spec}")
    assert view.filters == (expected,)
    assert parse(f"/d/x?f={expected}").filters == (expected,)  # str() writes it back


def test_parse_mixed_specs_and_delivery_flags() -> None:
    view = parse("/d/x?critical,nopersist,backlog=4,notify=7:abc,f=a+-b+t<3")
    assert view.critical and view.nopersist
    assert view.backlog == 4096
    assert view.notify == "7:abc"
    assert parse("/d/x?delta,backlog=0").backlog is None  # 0: the default, as in PPS
    assert view.attributes == {"a", "b"}  # '-b' asks for deletions of b: b is delivered
    assert view.filters == (AttributeFilter("t", "<", 3),)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("d/x", ["absolute"]),
        ("/", ["empty segment", "position 1"]),
        ("/d//x", ["empty segment", "position 3"]),
        ("/d/", ["empty segment", "position 3", ".all"]),
        ("/d/../x", ["'..'", "position 3"]),
        ("/d/./x", ["'.'", "position 3"]),
        ("/d/.all/x", ["'.all'", "last segment", "position 3"]),
        ("/d/.notify", ["'.notify'", "special object"]),
        ("/d/a\nb", ["U+000A", "position 4"]),
        ("/d/" + "x" * 509, ["509 bytes", "508"]),
        ("/d/x?", ["empty option list"]),
        ("/d/x?delta,,wait", ["empty open option", "position 11"]),
        ("/d/x?bogus", ["unknown open option 'bogus'", "position 5"]),
        ("/d/x?delta,frob=1", ["unknown open option 'frob=1'", "position 11"]),
        ("/d/x?cred", ["unsupported open option 'cred'"]),
        ("/d/x?backlog=x", ["backlog='x'", "number of KB"]),
        ("/d/x?backlog=-1", ["backlog='-1'"]),
        ("/d/x?backlog=9999999", ["backlog='9999999'"]),
        ("/d/x?server", ["unsupported open option 'server'", "point-to-point"]),
        ("/d/x?notify", ["'notify' needs a value"]),
        ("/d/x?notify=abc", ["id:value"]),
        ("/d/.all?deltadir,delta", ["'deltadir' gives object names only"]),
        ("/d/.all?deltadir,f=a", ["'deltadir' gives object names only"]),
        ("/d/x?delta,delta", ["'delta' given twice", "position 11"]),
        ("/d/x?delta=1", ["'delta' takes no value"]),
        ("/d/x?deltadir", ["'deltadir'", ".all"]),
        ("/d/x?f=", ["'f' needs a value"]),
        ("/d/x?f=1a", ["invalid attribute spec '1a'", "position 7"]),
        ("/d/x?f=a++b", ["empty attribute spec", "position 9"]),
        ("/d/x?f=a+", ["empty attribute spec", "position 9"]),
        ("/d/x?f=t<abc", ["operator '<' needs an integer", "position 7"]),
        ("/d/x?f=t>=1.5", ["operator '>=' needs an integer"]),
        ("/d/x?f=-t<3", ["'-' marks deletions"]),
        ("/d/x?f=s=a\\q", ["must escape", "position 10"]),
        ("/d/x?f=s=a\\", ["must escape"]),
    ],
)
def test_invalid_paths_name_the_problem(text: str, words: list[str]) -> None:
    with pytest.raises(InvalidView) as caught:
        parse(text)
    for word in words:
        assert word in str(caught.value)


def test_wire_round_trip_and_rejection() -> None:
    view = parse("/pps/d/.all?delta,f=a+t<37")
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(view), type=ObjectPath) == view
    bad = msgspec.msgpack.encode({"kind": "path", "path": "/d/x?bogus"})
    with pytest.raises(msgspec.ValidationError, match="unknown open option"):
        msgspec.msgpack.decode(bad, type=ObjectPath)


# --- matching ---------------------------------------------------------------------------------

PATHS = ["/d/x", "/d/y", "/d/sub/x", "/e/x", "/dx/y", "/x"]


def test_match_object_and_all() -> None:
    assert parse("/d/x?delta").match(PATHS).tolist() == [1, 0, 0, 0, 0, 0]
    assert parse("/d/.all").match(PATHS).tolist() == [1, 1, 0, 0, 0, 0]
    assert parse("/.all").match(np.array(PATHS)).tolist() == [0, 0, 0, 0, 0, 1]
    assert parse("/d/.all").match([]).shape == (0,)


def test_match_value_filters() -> None:
    attrs: list[Mapping[str, object]] = [
        {"t": 36},
        {"t": "40"},
        {"t": 1},
        {"t": 1},
        {},
        {"t": 36.5},
    ]
    paths = ["/d/a", "/d/b", "/d/sub/c", "/e/d", "/d/e", "/d/f"]
    assert parse("/d/.all?f=t<37").match(paths, attrs).tolist() == [1, 0, 0, 0, 0, 1]
    assert parse("/d/.all?f=t<0+t>=40").match(paths, attrs).tolist() == [0, 1, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="filters on attribute values"):
        parse("/d/.all?f=t<37").match(paths)


@pytest.mark.parametrize(
    ("value", "spec", "expected"),
    [
        (36, "t<37", True),
        ("36", "t<37", True),  # a string spelling an integer compares as one
        (36.9, "t<37", True),
        ("abc", "t<37", False),
        ("abc", "t!=37", True),
        (37, "t=37", True),
        ("037", "t=37", True),
        ("x+y", "t=x\\+y", True),
        ("foo", "t!=foo", False),
        (5, "t!=foo", True),
        (True, "t=true", True),
        (None, "t!=foo", False),  # an unset attribute passes no comparison
        (2**70, "t=1180591620717411303424", True),  # beyond long long: compared as strings
    ],
)
def test_value_comparisons(value: object, spec: str, expected: bool) -> None:
    assert parse(f"/d/x?f={spec}").match(["/d/x"], [{"t": value}]).tolist() == [expected]


def test_unsupported_value_type_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="not a str, int, float, bool or None"):
        parse("/d/x?f=t=1").match(["/d/x"], [{"t": [1]}])


# --- coverage ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("have", "view", "expected"),
    [
        (["/d/.all"], "/d/x", True),
        (["/d/.all"], "/d/x?f=a", True),
        (["/d/.all?f=a+b"], "/d/x?f=a", True),
        (["/d/x?f=a+b"], "/d/x?f=a", True),
        (["/d/x?f=a"], "/d/x?f=a+b", False),
        (["/d/x?f=t<40"], "/d/x?f=t<37", True),
        (["/d/x?f=t<37"], "/d/x?f=t<40", False),
        (["/d/x?f=t<=36"], "/d/x?f=t<37", False),  # values are reals: 36.5 < 37
        (["/d/x?f=t<0", "/d/x?f=t>=0"], "/d/x?f=t>5", True),
        (["/d/x?f=t<=37"], "/d/x?f=t=37", True),
        (["/d/x?f=t>=37"], "/d/x?f=t=37", True),
        (["/d/x?f=t>37"], "/d/x?f=t=37", False),
        (["/d/x?f=t<37+t>37"], "/d/x?f=t!=37", False),  # strings are unequal to 37 too
        (["/d/x?f=t<37+t>37+t=foo"], "/d/x?f=t!=37", False),
        (["/d/x?f=t<37+t>37+t!=foo+t=foo"], "/d/x?f=t!=37", True),
        (["/d/x?f=t!=37"], "/d/x?f=t=foo", True),
        (["/d/x?f=t=foo"], "/d/x?f=t!=37", False),
        (["/d/x?f=t<0+t>=0"], "/d/x?f=a+t=3", True),
        (["/d/x?f=t!=foo+t=foo"], "/d/x?f=t", True),  # every set value of t
        (["/d/x?f=t!=foo+t=foo"], "/d/x", False),  # not objects without t
        (["/d/x"], "/d/x?delta,wait,f=a", True),  # delivery options do not change coverage
        (["/d/x?delta,nopersist"], "/d/x", True),
        (["/d/x"], "/d/.all", False),
        (["/d/x", "/d/y"], "/d/.all", False),
        (["/d/.all"], "/e/x", False),
        (["/d/.all"], "/d/sub/x", False),
        ([], "/d/x", False),
    ],
)
def test_covers_examples(have: list[str], view: str, expected: bool) -> None:
    assert covers([parse(text) for text in have], parse(view)) is expected


class OtherView(ViewBase, tag="test-other-path"):
    path: str


def test_covers_ignores_views_of_other_kinds() -> None:
    assert not covers([OtherView("/d/.all")], parse("/d/x"))
    assert residual([OtherView("/d/.all")], parse("/d/x")) == [parse("/d/x")]


@pytest.mark.parametrize(
    ("have", "view", "expected"),
    [
        (["/d/x?f=t<0"], "/d/x?delta,f=t<0+t>100", ["/d/x?delta,f=t>100"]),
        (["/d/x?f=a"], "/d/x?f=a+b+c", ["/d/x?f=b+c"]),
        (["/d/x?f=a+t<0"], "/d/x?f=a+b+t<0+t>9", ["/d/x?f=a+t>9", "/d/x?f=b+t<0+t>9"]),
        ([], "/d/x?f=a+b", ["/d/x?f=a+b"]),
        (["/d/x"], "/d/.all", ["/d/.all"]),  # ".all but x" is not a path
        (["/d/.all"], "/d/x?f=a", []),
    ],
)
def test_residual_examples(have: list[str], view: str, expected: list[str]) -> None:
    pieces = residual([parse(text) for text in have], parse(view))
    assert sorted(piece.path for piece in pieces) == sorted(expected)


# --- brute force over small worlds ------------------------------------------------------------

ABSENT = None
# Representatives of every class of value the generated filters can tell apart: below, at and
# between the constants 0, 37, 40; the string constants; another string; unset.
VALUES: list[object] = [ABSENT, -1, 0, 20, 37, 38.5, 40, 41, "foo", "zzz"]
NAMES = ["x", "y", "w"]  # w: named by no view
WORLDS = [
    dict(zip(("a", "t", "b", "u"), values, strict=True))
    for values in itertools.product(VALUES, VALUES, [ABSENT, "v"], [ABSENT, "v"])
]  # u: an attribute no view names

OPS = ["<", "<=", ">", ">=", "=", "!="]


@st.composite
def object_paths(draw: st.DrawFn) -> ObjectPath:
    # Mostly one directory and object, so that haves and views often overlap.
    directory = draw(st.sampled_from(["/d", "/d", "/d", "/e"]))
    name = draw(st.sampled_from(["x", "x", "y", ".all"]))
    specs = sorted(draw(st.sets(st.sampled_from(["a", "b", "t"]), max_size=2)))
    for _ in range(draw(st.integers(0, 2))):
        attribute = draw(st.sampled_from(["a", "t"]))
        op = draw(st.sampled_from(OPS))
        value = draw(st.sampled_from([0, 37, 40] if op not in ("=", "!=") else [0, 37, "foo"]))
        specs.append(f"{attribute}{op}{value}")
    options = sorted(draw(st.sets(st.sampled_from(["delta", "wait", "nopersist"]), max_size=2)))
    options += [f"f={'+'.join(specs)}"] if specs else []
    return parse(f"{directory}/{name}" + ("?" + ",".join(options) if options else ""))


def holds(op: str, value: object, constant: object) -> bool:
    """One comparison on one value, by PPS's rules restated for the test's value set."""
    if value is None:
        return False
    numeric = isinstance(value, (int, float))
    if isinstance(constant, int) and numeric:
        return {
            "<": value < constant,
            "<=": value <= constant,
            ">": value > constant,
            ">=": value >= constant,
            "=": value == constant,
            "!=": value != constant,
        }[op]
    same = not numeric and value == constant
    return same if op == "=" else (op == "!=" and not same)


def cells(view: ObjectPath, obj: tuple[str, str], world: dict[str, object]) -> set[str]:
    """The attributes of one object in one world that ``view`` delivers."""
    directory, name = obj
    if directory != view.directory or (not view.all and name != view.object):
        return set()
    if view.filters and not any(holds(flt.op, world[flt.name], flt.value) for flt in view.filters):
        return set()
    present = {attribute for attribute, value in world.items() if value is not None}
    return present if view.attributes is None else present & view.attributes


def uncovered_cell(have: Sequence[ObjectPath], view: ObjectPath) -> bool:
    """Whether some object, in some world, has a cell ``view`` delivers and ``have`` does not.

    Only objects in the view's directory can have cells in the view.
    """
    objects = [(view.directory, name) for name in NAMES]
    for obj, world in itertools.product(objects, WORLDS):
        wanted = cells(view, obj, world)
        if wanted:
            held: set[str] = set()
            for item in have:
                held |= cells(item, obj, world)
            if not wanted <= held:
                return True
    return False


@settings(max_examples=200, deadline=None)
@given(st.lists(object_paths(), max_size=3), object_paths())
def test_covers_iff_every_cell_is_delivered(have: list[ObjectPath], view: ObjectPath) -> None:
    assert covers(have, view) is not uncovered_cell(have, view)


@settings(max_examples=100, deadline=None)
@given(st.lists(object_paths(), max_size=3), object_paths())
def test_residual_with_have_covers_the_view(have: list[ObjectPath], view: ObjectPath) -> None:
    pieces = residual(have, view)
    assert (pieces == []) is covers(have, view)
    for piece in pieces:
        assert (piece.delta, piece.wait) == (view.delta, view.wait)
        assert not uncovered_cell([view], piece), f"{piece.path} reaches outside {view.path}"
    assert not uncovered_cell([*have, *pieces], view)


@st.composite
def comparisons_on_t(draw: st.DrawFn) -> ObjectPath:
    """``/d/x`` with one or two comparisons on ``t``: the boundaries get exercised often."""
    specs = []
    for _ in range(draw(st.integers(1, 2))):
        op = draw(st.sampled_from(OPS))
        value = draw(st.sampled_from([0, 37] if op not in ("=", "!=") else [37, "foo"]))
        specs.append(f"t{op}{value}")
    return parse("/d/x?f=" + "+".join(specs))


@settings(max_examples=300, deadline=None)
@given(st.lists(comparisons_on_t(), max_size=3), comparisons_on_t())
def test_comparison_coverage_is_exact(have: list[ObjectPath], view: ObjectPath) -> None:
    assert covers(have, view) is not uncovered_cell(have, view)
