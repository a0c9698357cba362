"""SQL in the relay's algebra: release's probes (``relay.core.release``) and access rules
(``relay.core.rules``: a query's tables restricted to their rules' rows, RIGHT and FULL joins
refused; a rule is a query of its table, or a condition on its rows).

A SQL primitive (a ``SqlBox``) is found by its table and, among that table's, by the range of
the column their boxes constrain most often: two primitives whose hulls on a column are apart
share no row.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Sequence

import numpy as np
import sqlglot
import sqlglot.errors
from sqlglot import exp

from fanout.errors import InvalidView, Unauthorized
from fanout.relay.core.release import ReleasePart
from fanout.relay.core.rules import Rules, RulesPart
from fanout.views import View, sql
from fanout.views.sql import Sql, SqlBox

DIALECT = "duckdb"


class SqlRelease(ReleasePart):
    """SQL primitives found by table, then by hull (see the module)."""

    def meets(self, a: View, b: View) -> bool:
        if isinstance(a, SqlBox) and isinstance(b, SqlBox):
            return sql.meets(a, b)
        return True

    def registered(self, view: View) -> list[Hashable] | None:
        return [("sql", view.table)] if isinstance(view, SqlBox) else None

    def probes(self, view: View) -> list[Hashable] | None:
        return [("sql", view.table)] if isinstance(view, SqlBox) else None

    def among(self, views: Sequence[View]) -> Callable[[View], list[int]] | None:
        return _Hulls(views).overlapping


class _Hulls:
    """SQL primitives of one table with their hulls on one column (the one their boxes
    constrain most often), so that those whose hull overlaps a view's are found at once."""

    def __init__(self, views: Sequence[View]) -> None:
        boxes = [view for view in views if isinstance(view, SqlBox)]
        counts = Counter(
            column
            for view in boxes
            for box in view.boxes
            for column, values in box.ranges
            if values.domain == "num" and not values.null
        )
        self.column = counts.most_common(1)[0][0] if counts else None
        hulls = [_hull(view, self.column) for view in views]
        self.low = np.array([low for low, _ in hulls], dtype=np.float64)
        self.high = np.array([high for _, high in hulls], dtype=np.float64)

    def overlapping(self, view: View) -> list[int]:
        """The positions of the primitives whose hull overlaps ``view``'s."""
        low, high = _hull(view, self.column)
        close = (self.low <= high) & (self.high >= low)
        positions: list[int] = np.flatnonzero(close).tolist()
        return positions


def _hull(view: View, column: str | None) -> tuple[float, float]:
    """The closed range of ``column`` that ``view``'s rows may take (unbounded where a box does
    not constrain it, lets NULL in, or is not numeric; empty for no boxes)."""
    unbounded = (-math.inf, math.inf)
    if column is None or not isinstance(view, SqlBox):
        return unbounded
    low, high = math.inf, -math.inf
    for box in view.boxes:
        values = dict(box.ranges).get(column)
        if values is None or values.null or values.domain != "num":
            return unbounded
        for interval in values.intervals:  # a float rounds monotonically: never apart wrongly
            low = min(low, -math.inf if interval.low is None else float(interval.low))
            high = max(high, math.inf if interval.high is None else float(interval.high))
    return low, high


class SqlRules(RulesPart):
    """SQL queries: each table restricted by its own rules (see the module)."""

    def rule(self, dataset: str, text: str, language: str) -> View:
        return Sql(_rule_query(dataset, text).sql(dialect=DIALECT))

    def names_datasets(self, view: View) -> bool:
        return isinstance(view, Sql)

    def across(self, view: View, rules: Rules) -> View:
        assert isinstance(view, Sql), view  # names_datasets: a query
        return restrict_sql(view, rules)


def restrict_sql(view: Sql, rules: Rules) -> Sql:
    """A SQL view over its tables restricted to their rules' rows (see the module).

    Raises:
        Unauthorized: ``forbidden``: a table without rules, a RIGHT or FULL join, or rules
            that do not parse.
    """
    tree = sqlglot.parse_one(view.text, dialect=DIALECT)
    assert isinstance(tree, exp.Select), view.text  # Sql accepts nothing else
    where: list[exp.Expression] = []
    source = tree.args["from_"].this
    where += _predicates(source, rules)
    for join in tree.args.get("joins") or []:
        side = (join.side or "").upper()
        if side in ("RIGHT", "FULL"):
            raise Unauthorized(
                "forbidden", f"{side} joins are not served under access rules; use a LEFT join"
            )
        predicates = _predicates(join.this, rules)
        if side == "LEFT":
            on = join.args.get("on")
            join.set("on", exp.and_(*([on] if on is not None else []), *predicates))
        else:
            where += predicates
    if where:
        tree = tree.where(exp.and_(*where), copy=False)
    return Sql(tree.sql(dialect=DIALECT))


def _predicates(table: exp.Expression, rules: Rules) -> list[exp.Expression]:
    """The rules of one table of a query, qualified by its alias: one predicate (an OR)."""
    if not isinstance(table, exp.Table):
        raise Unauthorized("forbidden", "only tables are read under access rules")
    name, alias = table.name.lower(), table.alias_or_name
    texts = rules.get(name)
    if not texts:
        raise Unauthorized("forbidden", f"your token grants no rows of dataset {name!r}")
    conditions = []
    for number, text in enumerate(texts, 1):
        try:
            rule = _rule_query(name, text)
            Sql(rule.sql(dialect=DIALECT))  # the rule alone must be a valid view
        except InvalidView as exc:
            raise Unauthorized(
                "forbidden", f"your rule {number} on {name!r} is not a valid sql view: {exc}"
            ) from None
        condition = rule.args.get("where")
        if condition is None:
            return []  # a rule granting every row
        predicate = condition.this.copy()
        for column in predicate.find_all(exp.Column):
            column.set("table", exp.to_identifier(alias))
        conditions.append(exp.paren(predicate, copy=False))
    return [exp.paren(exp.or_(*conditions), copy=False)]


def _rule_query(dataset: str, text: str) -> exp.Select:
    """A SQL rule as a ``SELECT * FROM dataset WHERE ...``: given whole, or as its condition.

    Raises:
        InvalidView: it does not parse, or is a query of another table or of several.
    """
    whole = text.lstrip()[:6].lower() == "select"
    query = text if whole else f"SELECT * FROM {_quoted(dataset)} WHERE {text}"
    try:
        tree = sqlglot.parse_one(query, dialect=DIALECT)
    except sqlglot.errors.ParseError as exc:
        raise InvalidView(f"it does not parse ({str(exc).splitlines()[0]})") from None
    if not isinstance(tree, exp.Select):
        raise InvalidView("it is not a SELECT or a condition")
    source = tree.args.get("from_")
    if (
        source is None
        or not isinstance(source.this, exp.Table)
        or source.this.name.lower() != dataset
        or tree.args.get("joins")
    ):
        raise InvalidView(f"a rule reads its own table, {dataset!r}, alone")
    for key in ("limit", "offset", "distinct", "order", "group", "having"):
        if tree.args.get(key):
            raise InvalidView("a rule is a condition on rows: no LIMIT, DISTINCT, ORDER BY")
    return tree


def _quoted(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect=DIALECT)


RELEASE = SqlRelease()
RULES = SqlRules()
