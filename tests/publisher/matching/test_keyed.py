"""Topic, path and SQL matching in Spark agrees with the views' own matching (the oracle)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fanout.errors import InvalidView
from fanout.publisher.matching.paths import PathMatcher
from fanout.publisher.matching.sql import SqlMatcher
from fanout.publisher.matching.topics import TopicMatcher, filter_regex
from fanout.views import Box
from fanout.views import sql as sqlviews
from fanout.views.objects import parse as path
from fanout.views.topic import matches
from fanout.views.topic import parse as topic

pytestmark = pytest.mark.spark

LEVELS = ["a", "b", "", "$SYS", "x.y", "(c)"]
topic_names = st.lists(st.sampled_from(LEVELS), min_size=1, max_size=4).map("/".join).filter(bool)
filter_levels = st.lists(st.sampled_from([*LEVELS, "+"]), min_size=1, max_size=3)
filters = st.one_of(
    filter_levels.map("/".join),
    filter_levels.map(lambda levels: "/".join([*levels, "#"])),
    st.just("#"),
).filter(bool)


def run(spark, matcher, rows: pa.Table, prims: list) -> set[tuple[int | None, object]]:
    tables = matcher.tables(spark, prims)
    try:
        result = matcher.match(spark.createDataFrame(rows), tables, keep_unmatched=True).toArrow()
    finally:
        tables.unpersist()
    key = rows.column_names[0]
    return set(
        zip(result.column("_relay").to_pylist(), result.column(key).to_pylist(), strict=True)
    )


@settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(filters, min_size=1, max_size=6),
    st.lists(topic_names, min_size=1, max_size=30, unique=True),
)
def test_topic_filters_match_like_mqtt(spark, texts: list[str], names: list[str]) -> None:
    prims = [(i % 3, i, topic(text)) for i, text in enumerate(texts)]
    rows = pa.table({"topic": names, "value": [1.0] * len(names)})
    pairs = run(spark, TopicMatcher("topic"), rows, prims)
    expected = {(relay, name) for relay, _, f in prims for name in names if matches(f.filter, name)}
    assert {p for p in pairs if p[0] is not None} == expected
    # every row comes back at least once, so one job also yields every changed key
    assert {name for _, name in pairs} == set(names)


def test_rows_whose_topic_is_no_topic_name_are_matched_by_no_filter(spark) -> None:
    # As at a relay (relay.kinds.topic) and in the mirror (TopicFilter.match_arrow); such rows come
    # from a files source (the ingest log refuses them).
    names = ["", "a", "a/+", "#", "a\x00b", "x" * 65536, "/"]
    rows = pa.table({"topic": names, "value": [1.0] * len(names)})
    prims = [(1, 1, topic("#")), (2, 2, topic("+")), (3, 3, topic("a/#")), (4, 4, topic("+/+"))]
    pairs = run(spark, TopicMatcher("topic"), rows, prims)
    assert {p for p in pairs if p[0] is not None} == {
        (1, "a"),
        (2, "a"),
        (3, "a"),
        (1, "/"),
        (4, "/"),
    }
    assert {name for _, name in pairs} == set(names)  # still every row, for its changed key
    mirrored = {text: topic(text).match_arrow(pa.array(names)).tolist() for text in ("#", "+/+")}
    assert mirrored == {
        "#": [name in ("a", "/") for name in names],
        "+/+": [name == "/" for name in names],
    }


def test_filter_regexes_quote_and_guard() -> None:
    assert filter_regex("a/+/c") == "^a/[^/]*/c$"
    assert filter_regex("sport/#") == "^sport(/.*)?$"
    assert filter_regex("+/x") == r"^(?!\$)[^/]*/x$"
    assert filter_regex("x.y/(z)") == r"^x\.y/\(z\)$"


def test_shared_subscriptions_match_by_their_filter(spark) -> None:
    rows = pa.table({"topic": ["a/b", "a/c"], "value": [1.0, 2.0]})
    pairs = run(spark, TopicMatcher("topic"), rows, [(1, 1, topic("$share/g/a/b"))])
    assert (1, "a/b") in pairs
    assert (1, "a/c") not in pairs


def test_object_paths_match_objects_and_directories(spark) -> None:
    names = ["/pps/media/now", "/pps/media/next", "/pps/media/deep/x", "/pps/other", "/top"]
    rows = pa.table({"path": names, "value": ["v"] * len(names)})
    prims = [
        (1, 1, path("/pps/media/.all")),
        (2, 1, path("/pps/other?delta")),
        (3, 1, path("/.all")),
    ]
    pairs = run(spark, PathMatcher("path"), rows, prims)
    expected = {(relay, n) for relay, _, view in prims for n in names if view.in_scope([n])[0]}
    assert {p for p in pairs if p[0] is not None} == expected
    assert (1, "/pps/media/deep/x") not in pairs


def test_sql_primitives_match_like_their_own_match(spark) -> None:
    rows = pa.table(
        {
            "id": list(range(8)),
            "amount": [1.0, 5.0, 10.0, 50.0, None, 7.5, 99.0, 3.0],
            "status": ["new", "paid", "paid", "new", "new", None, "void", "paid"],
        }
    )
    views = [
        "SELECT * FROM orders WHERE amount > 5 AND status = 'paid'",
        "SELECT id FROM orders WHERE status IN ('new', 'void') OR amount IS NULL",
        "SELECT * FROM orders WHERE NOT (amount BETWEEN 2 AND 60)",
    ]
    matcher = SqlMatcher("orders", frozenset(rows.column_names))
    prims = [(i + 1, 1, matcher.check(sqlviews.parse(text))) for i, text in enumerate(views)]
    pairs = run(spark, matcher, rows, prims)
    expected = {
        (relay, key)
        for relay, _, prim in prims
        for key, hit in zip(rows.column("id").to_pylist(), prim.match(rows).tolist(), strict=True)
        if hit
    }
    assert {p for p in pairs if p[0] is not None} == expected
    assert expected  # the cases do select rows


def test_sql_primitives_over_bytes_match_by_null_only_in_spark_as_in_their_own_match(
    spark,
) -> None:
    """A bytes column is not bounded by value (views.sql.match, rule 5): Spark's matching and
    the primitive's own match (the mirror's, the relay's) both hold every non-NULL row for a
    comparison, NULL rows only for IS NULL; the relay evaluates the comparison itself."""
    rows = pa.table(
        {
            "id": list(range(4)),
            "blob": pa.array([b"\x00\xff", None, b"ab", b""], type=pa.binary()),
        }
    )
    views = [
        "SELECT * FROM orders WHERE blob = '\\x00\\xFF'::BLOB",
        "SELECT * FROM orders WHERE blob = 'ab'",
        "SELECT * FROM orders WHERE blob IS NULL",
        "SELECT * FROM orders WHERE blob > 'a' AND id < 3",
    ]
    matcher = SqlMatcher("orders", frozenset(rows.column_names), frozenset({"blob"}))
    prims = [(i + 1, 1, matcher.check(sqlviews.parse(text))) for i, text in enumerate(views)]
    pairs = run(spark, matcher, rows, prims)
    expected = {
        (relay, key)
        for relay, _, prim in prims
        for key, hit in zip(rows.column("id").to_pylist(), prim.match(rows).tolist(), strict=True)
        if hit
    }
    assert {p for p in pairs if p[0] is not None} == expected
    assert {key for relay, key in expected if relay == 2} == {0, 2, 3}  # every non-NULL row
    assert {key for relay, key in expected if relay == 3} == {1}
    assert {key for relay, key in expected if relay == 4} == {0, 2}


@pytest.mark.parametrize(
    ("matcher", "view", "message"),
    [
        (TopicMatcher("topic"), Box((0, 0), (1, 1)), "takes MQTT topic filters"),
        (PathMatcher("path"), topic("a/b"), "takes object paths"),
        (
            SqlMatcher("orders", frozenset({"id"})),
            sqlviews.parse("SELECT * FROM t"),
            "does not read table 'orders'",
        ),
        (
            SqlMatcher("orders", frozenset({"id"})),
            sqlviews.parse("SELECT * FROM orders WHERE x > 1"),
            "no column",
        ),
    ],
)
def test_views_that_do_not_fit_the_index_are_refused(matcher, view, message: str) -> None:
    with pytest.raises(InvalidView, match=message):
        matcher.check(view)
