"""What a SQL view may say: one ``SELECT`` in DuckDB's dialect (``views.sql.query`` rule 1).

The statement is parsed with sqlglot; the clauses and nodes views do not support are refused
with an :class:`fanout.errors.InvalidView` naming the clause and where it is in the text
(:class:`Locator`), and an accepted statement is rendered canonically (``normal_text``), so
that one view written two ways is one view.
"""

from __future__ import annotations

import sqlglot
import sqlglot.errors
from sqlglot import exp

from fanout.errors import InvalidView

DIALECT = "duckdb"

_SUPPORTED_CLAUSES = frozenset(
    {"expressions", "from_", "joins", "where", "order", "limit", "offset", "distinct"}
)
_REJECTED_CLAUSES = {
    "with_": "WITH (common table expressions)",
    "group": "GROUP BY",
    "having": "HAVING",
    "qualify": "QUALIFY",
    "windows": "WINDOW",
    "laterals": "LATERAL",
    "pivots": "PIVOT",
    "sample": "USING SAMPLE / TABLESAMPLE",
    "into": "INTO",
    "prewhere": "PREWHERE",
    "connect": "CONNECT BY",
    "locks": "FOR UPDATE",
    "kind": "SELECT AS",
}
_REJECTED_NODES: tuple[tuple[type[exp.Expr], str], ...] = (
    (exp.Subquery, "subqueries are not supported"),
    (exp.Select, "subqueries are not supported"),
    (exp.SetOperation, "set operations (UNION, INTERSECT, EXCEPT) are not supported"),
    (exp.Exists, "subqueries are not supported"),
    (exp.AggFunc, "aggregate functions are not supported"),
    (exp.Window, "window functions are not supported"),
    (exp.Placeholder, "query parameters are not supported; write the values in"),
    (exp.Parameter, "query parameters are not supported; write the values in"),
)


#: sqlglot's nodes for the clock's functions, and DuckDB's names of those it leaves anonymous.
_CLOCK_NODES = (
    exp.CurrentDate,
    exp.CurrentDatetime,
    exp.CurrentTime,
    exp.CurrentTimestamp,
    exp.CurrentTimestampLTZ,
    exp.Localtime,
    exp.Localtimestamp,
)
_CLOCK_NAMES = frozenset(
    {
        "now",
        "get_current_time",
        "get_current_timestamp",
        "transaction_timestamp",
        "current_localtime",
        "current_localtimestamp",
        "today",
    }
)


def reads_clock(select: exp.Select) -> bool:
    """Whether the query calls a function of the clock anywhere."""
    return any(
        isinstance(node, _CLOCK_NODES)
        or (isinstance(node, exp.Anonymous) and node.name.lower() in _CLOCK_NAMES)
        for node in select.walk()
    )


def parse(text: str) -> exp.Select:
    """Parse exactly one SELECT statement."""
    try:
        statements = [s for s in sqlglot.parse(text, read=DIALECT) if s is not None]
    except sqlglot.errors.ParseError as error:
        raise InvalidView(_parse_message(error)) from error
    except sqlglot.errors.TokenError as error:
        raise InvalidView(f"invalid SQL: {error}") from error
    except RecursionError as error:
        raise InvalidView("the query is nested too deeply to read") from error
    if not statements:
        raise InvalidView("the view's SQL is empty; expected a SELECT statement")
    if len(statements) > 1:
        raise InvalidView(f"a view is one SELECT statement; got {len(statements)} statements")
    statement = statements[0]
    if isinstance(statement, exp.SetOperation):
        raise InvalidView(f"{statement.key.upper()} is not supported; a view is one SELECT")
    if not isinstance(statement, exp.Select):
        raise InvalidView(f"only SELECT statements can be views; got {statement.key.upper()}")
    return statement


def _parse_message(error: sqlglot.errors.ParseError) -> str:
    """Turn sqlglot's parse error into a message with line, column and token."""
    if not error.errors:
        return f"invalid SQL: {error}"
    first = error.errors[0]
    near = f" near {first['highlight']!r}" if first.get("highlight") else ""
    return (
        f"invalid SQL at line {first['line']}, column {first['col']}{near}: {first['description']}"
    )


class Locator:
    """Describes where a node is in the view's text, for error messages."""

    def __init__(self, text: str) -> None:
        self._text = text

    def __call__(self, node: exp.Expr) -> str:
        """Return ``'fragment' at line L, column C`` (or just the fragment if not located)."""
        fragment = node.sql(dialect=DIALECT)
        if len(fragment) > 60:
            fragment = fragment[:57] + "..."
        starts = [n.meta["start"] for n in node.walk() if "start" in n.meta]
        if not starts:
            return repr(fragment)
        start = min(starts)
        line_start = self._text.rfind("\n", 0, start) + 1
        line = self._text.count("\n", 0, start) + 1
        return f"{fragment!r} at line {line}, column {start - line_start + 1}"


def check_clauses(select: exp.Select, where: Locator) -> None:
    """Reject the clauses views do not support, and empty SELECT lists or FROMs."""
    for key, value in select.args.items():
        if not value or key in _SUPPORTED_CLAUSES:
            continue
        name = _REJECTED_CLAUSES.get(key, key.upper())
        located = where(value) if isinstance(value, exp.Expr) else repr(value)
        raise InvalidView(f"{name} is not supported in a view: {located}")
    if not select.expressions:
        raise InvalidView("the SELECT list is empty")
    if select.args.get("from_") is None:
        raise InvalidView("a view must read a table: the FROM clause is missing")


def check_nodes(select: exp.Select, where: Locator) -> None:
    """Reject subqueries, aggregates, window functions and parameters anywhere."""
    for node in select.walk():
        if node is select:
            continue
        for kind, problem in _REJECTED_NODES:
            if isinstance(node, kind):
                raise InvalidView(f"{problem}: {where(node)}")


def distinct_on(select: exp.Select) -> bool:
    """Return True for ``SELECT DISTINCT ON (...)``, which picks rows."""
    distinct = select.args.get("distinct")
    return distinct is not None and distinct.args.get("on") is not None


def normal_text(select: exp.Select) -> str:
    """Render the statement canonically (DuckDB dialect, upper-case keywords, no comments)."""
    tree = select.copy()
    for node in tree.walk():
        node.comments = None
    return tree.sql(dialect=DIALECT)
