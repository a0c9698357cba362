"""SQL views by example: columns and tables, what covers what, spellings, and the errors
invalid views are refused with."""

from __future__ import annotations

import msgspec
import pytest

from fanout.errors import InvalidView
from fanout.views import sql
from fanout.views.sql import Sql, SqlBox, covers, parse, primitive_to_duckdb, residual
from fanout.views.sql.boxes import Box
from fanout.views.sql.values import Interval, ValueSet

# ---------------------------------------------------------------------------------------------
# Columns: projection is part of coverage


def test_a_have_with_fewer_columns_does_not_cover() -> None:
    narrow = parse("SELECT a FROM t WHERE x > 1")
    wide = parse("SELECT a, b FROM t WHERE x > 2")
    assert narrow.primitives()[0].columns == ("a", "x")
    assert not covers([narrow], wide)
    assert covers([parse("SELECT * FROM t WHERE x > 1")], wide)
    assert covers([parse("SELECT b, a, x, y FROM t")], wide)
    (left,) = residual([narrow], wide)
    assert left.columns == ("a", "b", "x")
    assert not covers([parse("SELECT a, b, x FROM t")], parse("SELECT * FROM t"))


def test_star_and_qualified_star_carry_every_column() -> None:
    assert parse("SELECT * FROM t").primitives()[0].columns is None
    assert parse("SELECT t.* FROM t").primitives()[0].columns is None
    assert parse("SELECT * EXCLUDE (a) FROM t").primitives()[0].columns is None
    joined = parse("SELECT u.*, e.email FROM users u JOIN emails e ON u.id = e.uid")
    emails, users = joined.primitives()
    assert users.columns is None
    assert emails.columns == ("email", "uid")


def test_columns_come_from_every_clause() -> None:
    view = parse("SELECT upper(name) AS n FROM t WHERE age > 3 ORDER BY n, score LIMIT 5")
    assert view.primitives()[0].columns == ("age", "name", "score")
    assert not view.exact


def test_views_know_their_tables_and_whether_they_are_exact() -> None:
    joined = parse(
        "SELECT * FROM users u JOIN emails e ON u.id = e.uid JOIN users m ON m.id = u.boss"
    )
    assert joined.tables == ("emails", "users")
    assert [prim.table for prim in joined.primitives()] == ["emails", "users"]
    assert not joined.exact
    assert parse("SELECT a FROM t WHERE a IN (1, 2) AND b IS NULL").exact
    assert not parse("SELECT DISTINCT ON (a) a, b FROM t WHERE a > 1").exact
    assert parse("SELECT DISTINCT a FROM t WHERE a > 1").exact


def test_a_view_that_selects_nothing_is_always_covered() -> None:
    empty = parse("SELECT * FROM t WHERE a > 1 AND a < 0")
    assert empty.primitives()[0].boxes == ()
    assert covers([], empty)
    assert residual([], empty) == []


def test_no_where_clause_is_the_whole_table() -> None:
    (prim,) = parse("SELECT a FROM t").primitives()
    assert prim.boxes == (Box(),)
    assert covers([prim], parse("SELECT a FROM t WHERE a > 1"))
    assert not covers([parse("SELECT a FROM t WHERE a > 1")], prim)


def test_other_kinds_of_view_in_have_are_ignored() -> None:
    view = parse("SELECT * FROM t WHERE a < 1")
    assert not covers([object(), "SELECT * FROM t"], view)
    assert covers([object(), parse("SELECT * FROM t")], view)
    with pytest.raises(TypeError, match="expected a SQL view"):
        covers([], "SELECT * FROM t")  # type: ignore[arg-type]


def test_have_primitives_from_other_tables_cover_nothing() -> None:
    assert not covers([parse("SELECT * FROM u")], parse("SELECT * FROM t"))
    assert residual([parse("SELECT * FROM u")], parse("SELECT * FROM t")) == list(
        parse("SELECT * FROM t").primitives()
    )


def test_residual_is_the_exact_remainder() -> None:
    have = [parse("SELECT * FROM t WHERE a < 3"), parse("SELECT * FROM t WHERE a > 5 OR a IS NULL")]
    (left,) = residual(have, parse("SELECT * FROM t"))
    assert left.boxes == (Box.of({"a": ValueSet("num", (Interval(3, 5, True, True),))}),)
    assert primitive_to_duckdb(left) == '"a" >= 3 AND "a" <= 5'
    assert covers([*have, left], parse("SELECT * FROM t"))


def test_strings_compared_with_dates_are_read_as_dates() -> None:
    view = parse("SELECT * FROM t WHERE d >= DATE '2024-01-01' AND d < '2024-02-01'")
    (prim,) = view.primitives()
    assert primitive_to_duckdb(prim) == (
        "\"d\" >= CAST('2024-01-01' AS DATE) AND \"d\" < CAST('2024-02-01' AS DATE)"
    )
    assert covers(
        [parse("SELECT * FROM t WHERE d BETWEEN DATE '2023-12-01' AND '2024-03-01'")], view
    )


# ---------------------------------------------------------------------------------------------
# Invalid views


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SELECT a FROM t WHERE a <", r"invalid SQL at line 1, column 25"),
        ("SELECT a FROM t WHERE s = 'abc", r"invalid SQL"),
        ("SELECT a\nFROM t\nWHERE a = = 1", r"invalid SQL at line 3, column 11"),
        ("", r"empty"),
        ("-- nothing", r"empty"),
        ("SELECT a FROM t; SELECT b FROM u", r"one SELECT statement; got 2"),
        ("INSERT INTO t VALUES (1)", r"only SELECT statements can be views; got INSERT"),
        ("DELETE FROM t", r"got DELETE"),
        ("SELECT a FROM t UNION SELECT a FROM u", r"UNION is not supported"),
        ("WITH x AS (SELECT 1) SELECT * FROM x", r"WITH .* not supported"),
        (
            "SELECT count(*) FROM t",
            r"aggregate functions are not supported: 'COUNT\(\*\)' at line 1, column 8",
        ),
        ("SELECT a FROM t GROUP BY a", r"GROUP BY is not supported"),
        ("SELECT a FROM t WHERE a IN (SELECT b FROM u)", r"subqueries are not supported"),
        ("SELECT a FROM t\nWHERE EXISTS (SELECT 1 FROM u)", r"subqueries .* line 2"),
        ("SELECT sum(a) OVER () FROM t", r"window functions are not supported"),
        ("SELECT a FROM t WHERE a = ?", r"parameters are not supported"),
        ("SELECT 1", r"FROM clause is missing"),
        ("SELECT * FROM read_csv('x.csv')", r"must name tables"),
        ("SELECT * FROM s.t", r"without a schema"),
        ("SELECT * FROM (SELECT 1) x", r"subqueries are not supported"),
        ("SELECT * FROM t NATURAL JOIN u", r"NATURAL JOIN is not supported"),
        ("SELECT * FROM t SEMI JOIN u ON t.a = u.a", r"SEMI JOIN is not supported"),
        ("SELECT a FROM t JOIN u ON t.x = u.y", r"column 'a' is ambiguous .* line 1, column 8"),
        ("SELECT t.a FROM t WHERE v.b = 1", r"unknown table 'v' in 'v.b' at line 1, column 25"),
        ("SELECT t.a FROM t AS x", r"unknown table 't'"),
        ("SELECT a FROM t WHERE a = 1 OR a = 'x'", r"column t.a is compared with .* 1 .* 'x'"),
        ("SELECT a + 1 AS b FROM t WHERE b > 3", r"'b' is also an alias in the SELECT list"),
        ("SELECT a FROM t WHERE a IN ()", r"IN \(\) needs at least one value"),
        ("SELECT * FROM t x, u x", r"alias 'x' is used twice"),
        (
            "SELECT * FROM a JOIN b ON a.i = b.i JOIN c USING (i)",
            r"USING is supported in the first",
        ),
        ("SELECT * FROM t AS u(p, q)", r"renaming a table's columns"),
    ],
)
def test_invalid_views_name_the_problem_and_where(text: str, message: str) -> None:
    with pytest.raises(InvalidView, match=message):
        parse(text)


def test_invalid_sql_from_the_wire_is_a_validation_error() -> None:
    encoded = msgspec.msgpack.encode({"kind": "sql", "text": "SELECT count(*) FROM t"})
    with pytest.raises(msgspec.ValidationError, match="aggregate functions are not supported"):
        msgspec.msgpack.decode(encoded, type=Sql)
    with pytest.raises(msgspec.ValidationError, match="not a value of the 'num' domain"):
        msgspec.json.decode(
            b'{"kind":"sqlbox","table":"t","boxes":[{"ranges":[["a",'
            b'{"domain":"num","intervals":[["x",null,true,false]]}]]}]}',
            type=SqlBox,
        )
    assert isinstance(InvalidView("x"), ValueError)


def test_sql_views_decode_from_the_view_union() -> None:
    view = parse("SELECT * FROM t WHERE a BETWEEN 1 AND 2")
    decoder = msgspec.msgpack.Decoder(sql.SqlView)
    assert decoder.decode(msgspec.msgpack.encode(view)) == view
    (prim,) = view.primitives()
    assert decoder.decode(msgspec.msgpack.encode(prim)) == prim
