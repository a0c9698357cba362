"""SQL views with joins against DuckDB: per-table primitives by predicate pushdown, whose rows
give the join the same result."""

from __future__ import annotations

from typing import Any

import duckdb
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st
from tests.views.sql.oracle import FAST, load, maybe

from fanout.views.sql import covers, parse, primitive_to_duckdb, residual, to_duckdb
from fanout.views.sql.boxes import Box

USERS = pa.schema([("id", pa.int64()), ("age", pa.int64()), ("name", pa.string())])
EMAILS = pa.schema([("uid", pa.int64()), ("domain", pa.string()), ("score", pa.float64())])


@st.composite
def join_tables(draw: st.DrawFn) -> tuple[pa.Table, pa.Table]:
    ages, names = [10, 20, 30, 40], ["ann", "bob", "cy"]
    users = draw(st.lists(st.tuples(maybe([1, 2, 3, 4]), maybe(ages), maybe(names)), max_size=8))
    domains, scores = ["x", "y", "z"], [0.5, 1.0, 2.0]
    emails = draw(
        st.lists(st.tuples(maybe([1, 2, 3, 5]), maybe(domains), maybe(scores)), max_size=8)
    )
    return (
        pa.table(list(zip(*users, strict=True)) or [[]] * 3, schema=USERS),
        pa.table(list(zip(*emails, strict=True)) or [[]] * 3, schema=EMAILS),
    )


JOIN_ATOMS = [
    "u.age > 15",
    "u.age <= 30",
    "u.age IS NULL",
    "u.name IN ('ann', 'cy')",
    "u.name <> 'bob'",
    "u.id < 3",
    "e.domain = 'x'",
    "e.domain IS NOT NULL",
    "e.score >= 1",
    "e.score BETWEEN 0.5 AND 1.5",
    "e.uid = 2",
    "u.age / 10 = e.score * 2",
    "e.domain LIKE 'y%'",
    "u.id = e.uid",
    "u.id + 1 = e.uid",
]


def join_predicates() -> st.SearchStrategy[str]:
    return st.recursive(
        st.sampled_from(JOIN_ATOMS),
        lambda inner: (
            st.builds(lambda p: f"NOT ({p})", inner)
            | st.builds(lambda p, q: f"({p} AND {q})", inner, inner)
            | st.builds(lambda p, q: f"({p} OR {q})", inner, inner)
        ),
        max_leaves=4,
    )


def _rows(db: duckdb.DuckDBPyConnection, query: str) -> list[tuple[Any, ...]]:
    return sorted(db.execute(query).fetchall(), key=repr)


@given(
    join_tables(),
    st.sampled_from(["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"]),
    join_predicates(),
    st.none() | join_predicates(),
)
@FAST
def test_join_on_the_primitives_rows_gives_the_same_result(
    db: duckdb.DuckDBPyConnection,
    tables_: tuple[pa.Table, pa.Table],
    join: str,
    on: str,
    where: str | None,
) -> None:
    """Relays hold only the primitives' rows; running the join on those must change nothing."""
    users, emails = tables_
    text = (
        f"SELECT u.name, u.age, e.domain, e.score FROM users u {join} emails e "
        f"ON u.id = e.uid AND {on}" + (f" WHERE {where}" if where else "")
    )
    view = parse(text)
    assert not view.exact
    load(db, "users", users)
    load(db, "emails", emails)
    expected = _rows(db, to_duckdb(view))
    for prim in view.primitives():
        source = users if prim.table == "users" else emails
        load(db, prim.table, source.filter(pa.array(prim.match(source))))
    assert _rows(db, to_duckdb(view)) == expected


THIRD_ATOMS = [
    "m.age > 15",
    "m.name = 'ann'",
    "m.age IS NULL",
    "m.id = u.id",
    "e.score > m.age / 20",
]


def third_predicates() -> st.SearchStrategy[str]:
    atoms = st.sampled_from(THIRD_ATOMS) | st.sampled_from(JOIN_ATOMS)
    return st.recursive(
        atoms,
        lambda inner: (
            st.builds(lambda p: f"NOT ({p})", inner)
            | st.builds(lambda p, q: f"({p} OR {q})", inner, inner)
        ),
        max_leaves=3,
    )


JOINS = st.sampled_from(["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "CROSS JOIN"])


@st.composite
def three_way_queries(draw: st.DrawFn) -> str:
    """A query joining users, emails and users again, with random join kinds and clauses."""
    first, second = draw(JOINS), draw(JOINS)
    first_on = "" if first == "CROSS JOIN" else f" ON u.id = e.uid AND {draw(join_predicates())}"
    second_on = "" if second == "CROSS JOIN" else f" ON m.id = e.uid AND {draw(third_predicates())}"
    return (
        f"SELECT u.name, e.domain, e.score, m.name, m.age FROM users u {first} emails e"
        f"{first_on} {second} users m{second_on} WHERE {draw(third_predicates())}"
    )


@given(join_tables(), three_way_queries())
@FAST
def test_three_way_joins_with_a_self_join_keep_their_result(
    db: duckdb.DuckDBPyConnection, tables_: tuple[pa.Table, pa.Table], text: str
) -> None:
    users, emails = tables_
    view = parse(text)
    load(db, "users", users)
    load(db, "emails", emails)
    expected = _rows(db, to_duckdb(view))
    for prim in view.primitives():
        source = users if prim.table == "users" else emails
        load(db, prim.table, source.filter(pa.array(prim.match(source))))
    assert _rows(db, to_duckdb(view)) == expected


def test_join_pushdown_transfers_through_equalities() -> None:
    view = parse(
        "SELECT u.name, e.email FROM users u JOIN emails e ON u.id = e.user_id "
        "WHERE u.id < 5 AND e.domain = 'x'"
    )
    emails, users = view.primitives()
    assert emails.table == "emails" and users.table == "users"
    assert primitive_to_duckdb(users) == '"id" < 5'
    assert primitive_to_duckdb(emails) == '"domain" = \'x\' AND "user_id" < 5'
    assert emails.columns == ("domain", "email", "user_id")
    assert covers([parse("SELECT * FROM users"), parse("SELECT * FROM emails")], view)
    assert not covers([parse("SELECT * FROM users")], view)
    (left,) = residual([parse("SELECT * FROM users")], view)
    assert left.table == "emails"


def test_left_join_needs_the_matching_rows_of_the_nullable_side() -> None:
    view = parse(
        "SELECT u.name, e.email FROM users u LEFT JOIN emails e "
        "ON u.id = e.uid AND e.verified WHERE u.age > 30 OR e.domain = 'x'"
    )
    emails, users = view.primitives()
    assert users.boxes == (Box(),)  # users of any age may have an email in domain x
    assert primitive_to_duckdb(emails) == 'NOT "uid" IS NULL AND "verified" = TRUE'


def test_self_join_unites_both_aliases() -> None:
    view = parse("SELECT a.id, b.id FROM t a JOIN t b ON a.parent = b.id WHERE a.x < 1 AND b.x > 5")
    (prim,) = view.primitives()
    assert primitive_to_duckdb(prim) == (
        '(NOT "id" IS NULL AND "x" > 5) OR (NOT "parent" IS NULL AND "x" < 1)'
    )
    assert prim.columns == ("id", "parent", "x")


def test_using_columns_resolve_without_qualifiers() -> None:
    view = parse("SELECT id, a.x, b.y FROM a JOIN b USING (id) WHERE id > 3")
    first, second = view.primitives()
    assert primitive_to_duckdb(first) == primitive_to_duckdb(second) == '"id" > 3'
    full = parse("SELECT id FROM a FULL JOIN b USING (id) WHERE id > 3")
    assert all(prim.boxes == (Box(),) for prim in full.primitives())
