"""Topic filters: MQTT spec examples, a brute-force oracle for matching, exact coverage."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import msgspec
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.errors import InvalidView
from fanout.views.base import ViewBase
from fanout.views.topic import TopicFilter, covers, matches, parse, residual

# --- the MQTT specification's examples --------------------------------------------------------

# (filter, topic, expected): MQTT 3.1.1 section 4.7 and MQTT 5.0 sections 4.7 and 4.8.2.
SPEC_MATCHES = [
    # 4.7.1.2 multi-level wildcard
    ("sport/tennis/player1/#", "sport/tennis/player1", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
    ("sport/#", "sport", True),
    ("#", "sport/tennis/player1", True),
    ("sport/tennis/#", "sport/tennis/player1/ranking", True),
    # 4.7.1.3 single-level wildcard
    ("sport/tennis/+", "sport/tennis/player1", True),
    ("sport/tennis/+", "sport/tennis/player2", True),
    ("sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("sport/+", "sport", False),
    ("sport/+", "sport/", True),
    ("+", "sport", True),
    ("+/tennis/#", "sport/tennis/player1", True),
    ("sport/+/player1", "sport/tennis/player1", True),
    ("+/+", "/finance", True),
    ("/+", "/finance", True),
    ("+", "/finance", False),
    # 4.7.2 topics beginning with $
    ("#", "$SYS/broker/clients", False),
    ("+/monitor/Clients", "$SYS/monitor/Clients", False),
    ("$SYS/#", "$SYS/broker/clients", True),
    ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
    # 4.7.3 topic semantic and usage: case sensitive, spaces allowed, leading '/' significant
    ("ACCOUNTS", "Accounts", False),
    ("Accounts payable", "Accounts payable", True),
    ("/finance", "finance", False),
    ("finance", "/finance", False),
    # 5.0 4.8.2 shared subscriptions match what their filter matches
    ("$share/consumer1/sport/tennis/+", "sport/tennis/player1", True),
    ("$share/consumer2/sport/tennis/+", "sport/tennis/player1", True),
    ("$share/consumer1//finance", "/finance", True),
    ("$share/consumer1//finance", "finance", False),
    ("$share/g/#", "$SYS/x", False),
]

# (filter, words the error must contain)
SPEC_INVALID_FILTERS = [
    ("sport/tennis#", ["'#' must occupy a whole level", "level 1", "position 12"]),
    ("sport/tennis/#/ranking", ["'#' must be the last level", "level 2", "position 13"]),
    ("sport+", ["'+' must occupy a whole level", "level 0", "position 5"]),
    ("", ["empty"]),
    ("a/\x00", ["U+0000", "position 2"]),
    ("$share/g", ["no topic filter"]),
    ("$share/g/", ["no topic filter"]),
    ("$share//x", ["empty share name", "position 7"]),
    ("$share/g+/x", ["share name", "'+'", "position 8"]),
    ("$share/#/x", ["share name", "'#'", "position 7"]),
    ("$share/g/a#", ["'#' must occupy a whole level", "level 2", "position 10"]),
    ("x" * 65536, ["65536 bytes", "65535"]),
    ("\ud800", ["lone surrogate"]),
]


@pytest.mark.parametrize(("filter_text", "topic", "expected"), SPEC_MATCHES)
def test_spec_examples_match(filter_text: str, topic: str, expected: bool) -> None:
    assert matches(filter_text, topic) is expected
    assert parse(filter_text).matches(topic) is expected
    assert parse(filter_text).match([topic]).tolist() == [expected]


@pytest.mark.parametrize(("filter_text", "words"), SPEC_INVALID_FILTERS)
def test_spec_invalid_filters_name_the_problem(filter_text: str, words: list[str]) -> None:
    with pytest.raises(InvalidView) as caught:
        parse(filter_text)
    for word in words:
        assert word in str(caught.value)
    with pytest.raises(InvalidView):
        matches(filter_text, "sport")


@pytest.mark.parametrize(
    ("topic", "words"),
    [
        ("sport/+", ["wildcard '+'", "level 1", "position 6"]),
        ("sport/#", ["wildcard '#'", "level 1", "position 6"]),
        ("", ["empty"]),
        ("a\x00b", ["U+0000", "position 1"]),
        ("é" * 32768, ["65536 bytes"]),
    ],
)
def test_invalid_topic_names_name_the_problem(topic: str, words: list[str]) -> None:
    with pytest.raises(InvalidView) as caught:
        matches("#", topic)
    for word in words:
        assert word in str(caught.value)


def test_longest_topic_is_accepted() -> None:
    assert matches("#", "é" * 32767 + "x")  # 65535 bytes of UTF-8


def test_invalid_view_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="whole level"):
        parse("a+")


def test_shared_filter_exposes_group_and_filter() -> None:
    shared = parse("$share/consumer1/sport/tennis/+")
    assert shared.share_group == "consumer1"
    assert shared.topic_filter == "sport/tennis/+"
    assert shared.levels == ("sport", "tennis", "+")
    plain = parse("sport/tennis/+")
    assert (plain.share_group, plain.topic_filter) == (None, "sport/tennis/+")
    assert parse("$share").share_group is None  # "$share" without '/' is an ordinary filter


def test_wire_round_trip_and_rejection() -> None:
    view = parse("$share/g/a/+/#")
    data = msgspec.msgpack.encode(view)
    assert msgspec.msgpack.decode(data, type=TopicFilter) == view
    bad = msgspec.msgpack.encode({"kind": "topic", "filter": "a/#/b"})
    with pytest.raises(msgspec.ValidationError, match="must be the last level"):
        msgspec.msgpack.decode(bad, type=TopicFilter)


def test_vectorised_match_takes_numpy_arrays() -> None:
    topics = np.array(["a/b", "a", "$SYS/b", "a/b/c", "x/b"])
    assert parse("+/b").match(topics).tolist() == [True, False, False, False, True]
    assert parse("a/#").match(topics).tolist() == [True, True, False, True, False]
    assert parse("a/b").match([]).shape == (0,)


# --- an independent oracle --------------------------------------------------------------------


def oracle(filter_levels: Sequence[str], topic: Sequence[str], first: bool = True) -> bool:
    """MQTT matching by its recursive definition (4.7.1, 4.7.2)."""
    dollar = first and topic[0].startswith("$")
    if not filter_levels:
        return not topic
    head, rest = filter_levels[0], filter_levels[1:]
    if head == "#":
        return not dollar
    if not topic:
        return False
    if head == "+":
        return not dollar and oracle(rest, topic[1:], first=False)
    return head == topic[0] and oracle(rest, topic[1:], first=False)


def oracle_view(view: TopicFilter, topic: Sequence[str]) -> bool:
    text = view.filter
    if text.startswith("$share/"):
        text = text.split("/", 2)[2]
    return oracle(text.split("/"), topic)


ALPHABET = ["a", "b", "", "$s"]
level = st.sampled_from(ALPHABET)
topics = st.lists(level, min_size=1, max_size=4).filter(lambda t: t != [""])  # "" is no topic


@st.composite
def filter_texts(draw: st.DrawFn, max_levels: int = 4, shared: bool = False) -> str:
    """Valid filters over ALPHABET: '+' anywhere, '#' only last, optionally shared."""
    levels = draw(st.lists(st.sampled_from([*ALPHABET, "+"]), min_size=1, max_size=max_levels))
    if draw(st.booleans()):
        levels[-1] = "#"
    text = "/".join(levels) or "+"  # a filter has at least one character
    if shared and draw(st.booleans()):
        text = f"$share/{draw(st.sampled_from(['g', 'h']))}/{text}"
    return text


@given(filter_texts(), topics)
def test_matches_agrees_with_the_oracle(filter_text: str, topic: list[str]) -> None:
    expected = oracle(filter_text.split("/"), topic)
    assert matches(filter_text, "/".join(topic)) is expected


@given(filter_texts(shared=True), st.lists(topics, max_size=8))
def test_vectorised_match_agrees_with_the_oracle(
    filter_text: str, topic_list: list[list[str]]
) -> None:
    view = parse(filter_text)
    expected = [oracle_view(view, topic) for topic in topic_list]
    assert view.match(["/".join(topic) for topic in topic_list]).tolist() == expected


# Levels that would be regex syntax, or escapes, if written into a pattern as they are.
SPECIAL = ["x.y", "xzy", "(c)", "c", "a*", "aa", "é", " s", "\\E", "[^/]", "$s", "", "a"]


@given(
    filter_texts(shared=True),
    st.lists(
        st.one_of(st.none(), st.lists(st.sampled_from(SPECIAL), min_size=1, max_size=4)),
        max_size=8,
    ),
    st.lists(st.sampled_from(SPECIAL), max_size=2),
)
def test_arrow_match_agrees_with_the_oracle(
    filter_text: str, topic_list: list[list[str] | None], prefix: list[str]
) -> None:
    text = "/".join([*prefix, filter_text]) if prefix else filter_text
    view = parse(text) if not text.startswith("$share/") or not prefix else parse(filter_text)
    names = [None if topic is None else "/".join(topic) for topic in topic_list]
    names = [None if name == "" else name for name in names]  # "" is no topic
    expected = [False if name is None else oracle_view(view, name.split("/")) for name in names]
    assert view.match_arrow(pa.array(names, pa.string())).tolist() == expected


def test_arrow_match_takes_chunked_arrays() -> None:
    topics = pa.chunked_array([["a/b", "$SYS/b"], ["x/b", None]])
    assert parse("+/b").match_arrow(topics).tolist() == [True, False, True, False]


# --- coverage, checked against every topic up to the depth that decides it -------------------


class OtherView(ViewBase, tag="test-other"):
    """A view of another kind, which topic coverage must ignore."""

    filter: str


FRESH = ["z", "$z"]  # a level no filter names, and one starting with '$'


def witness_topics(views: Sequence[TopicFilter]) -> list[tuple[str, ...]]:
    """All topics over the filters' levels plus fresh ones, one level deeper than the longest.

    A topic a view matches and no have does, if one exists, exists among these: a longer one
    stays a witness when cut to this depth, and unnamed levels behave like the fresh ones.
    """
    depth = max(len(view.levels) for view in views) + 1
    alphabet = sorted({lvl for view in views for lvl in view.levels} - {"+", "#"} | set(FRESH))
    return [
        topic
        for length in range(1, depth + 1)
        for topic in itertools.product(alphabet, repeat=length)
        if topic != ("",)  # the empty string is not a topic name
    ]


def usable(have: Sequence[TopicFilter], view: TopicFilter) -> list[TopicFilter]:
    return [h for h in have if h.share_group in (None, view.share_group)]


def brute_covers(have: Sequence[TopicFilter], view: TopicFilter) -> bool:
    serving = usable(have, view)
    return all(
        any(oracle_view(h, topic) for h in serving)
        for topic in witness_topics([view, *have])
        if oracle_view(view, topic)
    )


coverage_filters = filter_texts(max_levels=3, shared=True).map(parse)


@settings(max_examples=300)
@given(st.lists(coverage_filters, max_size=4), coverage_filters)
def test_covers_iff_no_witness_topic(have: list[TopicFilter], view: TopicFilter) -> None:
    assert covers(have, view) is brute_covers(have, view)


@settings(max_examples=200)
@given(st.lists(coverage_filters, max_size=4), coverage_filters)
def test_residual_with_have_covers_the_view(have: list[TopicFilter], view: TopicFilter) -> None:
    pieces = residual(have, view)
    assert (pieces == []) is covers(have, view)
    every = witness_topics([view, *have, *pieces])
    for piece in pieces:
        assert piece.share_group == view.share_group
        assert all(oracle_view(view, t) for t in every if oracle_view(piece, t)), piece
    serving = [*usable(have, view), *pieces]
    for topic in every:
        if oracle_view(view, topic):
            assert any(oracle_view(h, topic) for h in serving), topic


@pytest.mark.parametrize(
    ("have", "view", "expected"),
    [
        (["a/#"], "a/b/+", True),
        (["a/+/c", "a/b/#"], "a/#", False),
        (["a/+/c", "a/b/#"], "a/b/c", True),
        (["+/x"], "$sys/x", False),
        (["#"], "$SYS/#", False),
        (["#", "$SYS/#"], "$SYS/monitor/+", True),
        (["a/+", "a"], "a/+", True),
        (["a/+", "a", "a/+/+/#"], "a/#", True),
        (["a/+", "a/+/+/#"], "a/#", False),  # misses "a" itself
        (["+/+"], "/+", True),
        (["/+/#"], "/#", True),  # "/#" also matches "", but "" is no topic name
        (["/+/#"], "+/#", False),  # "x" itself
        ([], "a", False),
        (["$share/g/a/#"], "a/b", False),  # a share of the messages is not all of them
        (["$share/g/a/#"], "$share/g/a/b", True),
        (["$share/g/a/#"], "$share/h/a/b", False),
        (["a/#"], "$share/g/a/b", True),
    ],
)
def test_covers_examples(have: list[str], view: str, expected: bool) -> None:
    assert covers([parse(text) for text in have], parse(view)) is expected


def test_covers_ignores_views_of_other_kinds() -> None:
    assert not covers([OtherView("#")], parse("a"))
    assert covers([OtherView("x"), parse("#")], parse("a"))
    assert residual([OtherView("#")], parse("a")) == [parse("a")]


@pytest.mark.parametrize(
    ("have", "view", "expected"),
    [
        (["a/+/#"], "a/#", ["a"]),
        (["+/+/#"], "#", ["+"]),
        (["x"], "#", ["#"]),
        (["a/#"], "a/b", []),
        (["a/b"], "a/+", ["a/+"]),  # "a/+ except a/b" is not a filter: the view stays whole
        (["a", "a/+/+/#"], "a/#", ["a/+"]),
        (["$share/g/a/+/#"], "$share/g/a/#", ["$share/g/a"]),
    ],
)
def test_residual_examples(have: list[str], view: str, expected: list[str]) -> None:
    pieces = residual([parse(text) for text in have], parse(view))
    assert [piece.filter for piece in pieces] == expected
