"""One SQL view: validation, tables and joins, columns, and the per-table primitives it needs
(CA 3197003 [0158]-[0161], Fig. 8: the relay checks coverage per table and runs the query on its
copy, [0094], [0163]). Rules:

1. A view is one ``SELECT [DISTINCT [ON]] ... FROM ... [joins] [WHERE] [ORDER BY] [LIMIT]
   [OFFSET]`` in DuckDB's dialect, joins INNER, LEFT, RIGHT, FULL, CROSS with ON or USING;
   anything else raises :class:`fanout.errors.InvalidView` naming the clause.
2. Columns resolve without a schema; over several tables they must be qualified (but USING's).
3. **Pushdown.** A table needs the projection of ``WHERE AND`` every inner join's ON onto its
   columns; on the NULL-extended side of an outer join also that join's ON; narrowed by its own
   join's ON when INNER or LEFT. Projections over-approximate, safely.
4. A primitive carries the columns the query uses from its table (``*``: all, ``columns`` None).
5. ``exact``: one table, WHERE boxed exactly, no LIMIT/OFFSET/DISTINCT ON. ``faithful``: the
   boxes with atoms hold exactly the rows (one table, no LIMIT/OFFSET/DISTINCT ON, no bounding
   box); coverage counts on a held view's rows only then.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlglot import exp

from fanout.errors import InvalidView
from fanout.views.sql.boxes import Box, simplify
from fanout.views.sql.fields import Atom, Fields, QualifiedColumn, column_domains
from fanout.views.sql.syntax import (
    Locator,
    check_clauses,
    check_nodes,
    distinct_on,
    normal_text,
    parse,
    reads_clock,
)
from fanout.views.sql.values import ValueSet
from fanout.views.sql.where import TRUE, Normaliser, Truth, and_, equality, project


@dataclass(frozen=True)
class TableNeed:
    """What one table must supply.

    Attributes:
        table: the table's name.
        columns: the columns the query uses from it (None: all).
        boxes: the rows, as boxes over real columns: the primitive a relay subscribes for.
        cover: the same rows as boxes over columns and atoms (``fanout.views.sql.where.Atom``):
            at most the rows of ``boxes``, compared atom by atom in coverage.
    """

    table: str
    columns: tuple[str, ...] | None
    boxes: tuple[Box, ...]
    cover: tuple[Mapping[str | Atom, ValueSet], ...]


@dataclass(frozen=True)
class Analysis:
    """A parsed and validated view.

    Attributes:
        text: the normalised SQL text.
        needs: what each table the query reads must supply, sorted by table.
        exact: the primitive selects exactly the query's rows (one table, all boxed, no LIMIT).
        faithful: ``needs[0].cover`` holds exactly the query's rows (one table, no LIMIT).
        clock: the query reads the clock (``now()``, ``current_date``, ...): its result may
            change while its tables do not.
    """

    text: str
    needs: tuple[TableNeed, ...]
    exact: bool
    faithful: bool
    clock: bool = False


@dataclass(frozen=True)
class _Source:
    alias: str
    table: str


@dataclass(frozen=True)
class _Join:
    index: int  # position of the joined table among the sources (1 for the first join)
    kind: str  # "inner", "left", "right" or "full"
    on: exp.Expr | None
    using: tuple[str, ...]

    def nullable(self, position: int) -> bool:
        """Return True if the source at ``position`` is NULL-extended by this join."""
        if self.kind == "left":
            return position == self.index
        if self.kind == "right":
            return position < self.index
        return self.kind == "full" and position <= self.index


def analyse(text: str) -> Analysis:
    """Parse, validate and decompose a SQL view.

    Args:
        text: the view's SQL, DuckDB dialect.

    Returns:
        The view's normalised text, the primitive each table must supply, and whether the
        primitive alone selects exactly the query's rows.

    Raises:
        InvalidView: the SQL does not parse or uses something views do not support; the message
            names the problem and its line and column (or the offending fragment).
    """
    select = parse(text)
    where = Locator(text)
    check_clauses(select, where)
    check_nodes(select, where)
    sources, joins = _sources(select, where)
    scope = _Scope(sources, joins, _output_aliases(select), where)
    carried = _carried_columns(select, scope, joins)
    contexts = _truths(select, joins, scope)
    needs = _needs(sources, joins, contexts, carried)
    row_selection = select.args.get("limit") or select.args.get("offset") or distinct_on(select)
    whole = len(sources) == 1 and not row_selection
    text = normal_text(select)
    rows = contexts[0].true
    return Analysis(
        text, needs, whole and rows.exact, whole and rows.faithful, clock=reads_clock(select)
    )


# ---------------------------------------------------------------------------------------------
# Tables and joins


def _sources(select: exp.Select, where: Locator) -> tuple[list[_Source], list[_Join]]:
    """Return the query's tables in FROM order and its joins."""
    sources = [_source(select.args["from_"].this, where)]
    joins: list[_Join] = []
    for node in select.args.get("joins") or []:
        sources.append(_source(node.this, where))
        joins.append(_join(node, len(sources) - 1, where))
    aliases = [source.alias for source in sources]
    for alias in aliases:
        if aliases.count(alias) > 1:
            raise InvalidView(f"table alias {alias!r} is used twice; give each table its own alias")
    return sources, joins


def _source(node: exp.Expr, where: Locator) -> _Source:
    """Read one FROM or JOIN item, which must be a plain table (with an alias)."""
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
        raise InvalidView(f"FROM and JOIN must name tables; {where(node)} is not a table")
    if node.args.get("db") or node.args.get("catalog"):
        raise InvalidView(f"tables must be named without a schema or catalog: {where(node)}")
    extras = [key for key, value in node.args.items() if value and key not in ("this", "alias")]
    if extras:
        raise InvalidView(f"FROM and JOIN must name plain tables: {where(node)}")
    alias = node.args.get("alias")
    if alias is not None and alias.columns:
        raise InvalidView(f"renaming a table's columns is not supported: {where(node)}")
    table = node.name.lower()
    return _Source(alias.name.lower() if alias is not None else table, table)


def _join(node: exp.Join, index: int, where: Locator) -> _Join:
    """Read one join's kind, ON clause and USING columns; reject the unsupported kinds."""
    method = str(node.args.get("method") or "").upper()
    kind = str(node.args.get("kind") or "").upper()
    side = str(node.args.get("side") or "").lower()
    if method or kind in ("SEMI", "ANTI") or node.args.get("match_condition"):
        name = method or kind or "ASOF"
        raise InvalidView(f"{name} JOIN is not supported: {where(node)}")
    using = tuple(identifier.name.lower() for identifier in node.args.get("using") or [])
    if using and index > 1:
        raise InvalidView(
            f"USING is supported in the first join only (later ones need the tables' schemas); "
            f"write ON instead: {where(node)}"
        )
    return _Join(index, side or "inner", node.args.get("on"), using)


def _output_aliases(select: exp.Select) -> dict[str, exp.Expr]:
    """Return the SELECT list's aliases and the expressions they name."""
    return {
        item.alias.lower(): item.this for item in select.expressions if isinstance(item, exp.Alias)
    }


class _Scope:
    """Resolves column references to (alias, column) without knowing the tables' schemas."""

    def __init__(
        self,
        sources: Sequence[_Source],
        joins: Sequence[_Join],
        output_aliases: dict[str, exp.Expr],
        where: Locator,
    ) -> None:
        self.aliases = [source.alias for source in sources]
        self.output_aliases = output_aliases
        self.using: dict[str, QualifiedColumn | None] = {}
        self._where = where
        for join in joins:
            for name in join.using:
                left, right = (self.aliases[0], name), (self.aliases[join.index], name)
                self.using[name] = {"inner": left, "left": left, "right": right}.get(join.kind)

    def resolve(self, column: exp.Column) -> QualifiedColumn | None:
        """Return the (alias, column) a reference names; None if it names no single column.

        Raises:
            InvalidView: the qualifier is not a table of the query, the reference has more than
                two parts, or an unqualified column is ambiguous.
        """
        if column.args.get("db") or column.args.get("catalog"):
            raise InvalidView(f"column references have at most two parts: {self._where(column)}")
        name, qualifier = column.name.lower(), column.table.lower()
        if qualifier:
            if qualifier not in self.aliases:
                raise InvalidView(
                    f"unknown table {qualifier!r} in {self._where(column)}; "
                    f"the query reads {', '.join(self.aliases)}"
                )
            return qualifier, name
        self._check_not_output_alias(column, name)
        if len(self.aliases) == 1:
            return self.aliases[0], name
        if name in self.using:
            return self.using[name]
        if name in self.aliases:
            return None  # a whole-row reference; carried as all of that table's columns
        raise InvalidView(
            f"column {name!r} is ambiguous in a query over several tables; qualify it "
            f"(e.g. {self.aliases[0]}.{name}): {self._where(column)}"
        )

    def _check_not_output_alias(self, column: exp.Column, name: str) -> None:
        """Reject a WHERE/ON reference that may mean a SELECT alias rather than a column."""
        aliased = self.output_aliases.get(name)
        if aliased is None or column.find_ancestor(exp.Where, exp.Join) is None:
            return
        if isinstance(aliased, exp.Column) and aliased.name.lower() == name:
            return
        raise InvalidView(
            f"{name!r} is also an alias in the SELECT list, so it is unclear whether the filter "
            f"means the column or the alias; qualify the column or repeat the expression: "
            f"{self._where(column)}"
        )


# ---------------------------------------------------------------------------------------------
# Columns, predicates and per-table needs


def _carried_columns(
    select: exp.Select, scope: _Scope, joins: Sequence[_Join]
) -> dict[str, set[str] | None]:
    """Return, per alias, the columns the query uses (None: all of them)."""
    carried: dict[str, set[str] | None] = {alias: set() for alias in scope.aliases}

    def carry(alias: str, column: str | None) -> None:
        found = carried[alias]
        if column is None:
            carried[alias] = None
        elif found is not None:
            found.add(column)

    for join in joins:
        for name in join.using:
            carry(scope.aliases[0], name)
            carry(scope.aliases[join.index], name)
    for node in select.walk():
        if isinstance(node, exp.Columns) or (
            isinstance(node, exp.Star) and not isinstance(node.parent, exp.Column)
        ):
            for alias in scope.aliases:
                carry(alias, None)
        elif isinstance(node, exp.Column):
            for alias, column in _column_use(node, scope):
                carry(alias, column)
    return carried


def _column_use(node: exp.Column, scope: _Scope) -> list[tuple[str, str | None]]:
    """Return the (alias, column or None for all columns) a column reference uses."""
    name, qualifier = node.name.lower(), node.table.lower()
    if isinstance(node.this, exp.Star):
        return [(alias, None) for alias in scope.aliases if not qualifier or alias == qualifier]
    if not qualifier and name in scope.output_aliases and node.find_ancestor(exp.Order):
        return []  # ORDER BY an output column
    if not qualifier and name in scope.aliases:
        return [(name, None)]  # a table alias used as a column: the whole row
    resolved = scope.resolve(node)
    return [] if resolved is None else [resolved]  # None: a USING column, carried already


def _truths(select: exp.Select, joins: Sequence[_Join], scope: _Scope) -> list[Truth]:
    """Return the truth of ``WHERE AND inner ONs``, then of each join's ON clause."""
    where = select.args.get("where")
    clauses = [where.this] if where is not None else []
    clauses += [join.on for join in joins if join.on is not None]
    fields = Fields(scope.resolve, scope.aliases)
    normaliser = Normaliser(fields, column_domains(clauses, fields))
    result = normaliser.truth(where.this) if where is not None else TRUE
    ons: list[Truth] = []
    for join in joins:
        on = normaliser.truth(join.on) if join.on is not None else TRUE
        for name in join.using:
            on = and_(on, equality((scope.aliases[0], name), (scope.aliases[join.index], name)))
        ons.append(on)
        if join.kind == "inner":
            result = and_(result, on)
    return [result, *ons]


def _needs(
    sources: Sequence[_Source],
    joins: Sequence[_Join],
    truths: Sequence[Truth],
    carried: dict[str, set[str] | None],
) -> tuple[TableNeed, ...]:
    """Project the truths onto each table: the rows (and columns) each table must supply."""
    cover: dict[str, list[dict[str | Atom, ValueSet]]] = {}
    columns: dict[str, set[str] | None] = {}
    for position, source in enumerate(sources):
        gate = _gate(joins, truths, position)
        contexts = [truths[0]]
        contexts += [truths[i + 1] for i, join in enumerate(joins) if join.nullable(position)]
        found = cover.setdefault(source.table, [])
        for context in contexts:
            found.extend(project(and_(context, gate).true.conjuncts, source.alias))
        columns[source.table] = _union_columns(
            columns.get(source.table, set()), carried[source.alias]
        )
    return tuple(_need(table, columns[table], cover[table]) for table in sorted(cover))


def _need(
    table: str, columns: set[str] | None, cover: list[dict[str | Atom, ValueSet]]
) -> TableNeed:
    """Build a table's need: its cover, and the primitive boxes left once atoms are dropped."""
    tidy = simplify(cover)
    real = simplify([real_columns(box) for box in tidy])
    return TableNeed(
        table,
        None if columns is None else tuple(sorted(columns)),
        tuple(Box.of(box) for box in real),
        tuple(tidy),
    )


def real_columns(box: Mapping[str | Atom, ValueSet]) -> dict[str, ValueSet]:
    """Return a box without its atoms: the over-approximation a primitive can carry."""
    return {key: values for key, values in box.items() if isinstance(key, str)}


def _gate(joins: Sequence[_Join], truths: Sequence[Truth], position: int) -> Truth:
    """Return the ON clause every row of the source at ``position`` passes to go any further.

    A table joined by an INNER or LEFT join continues past its own join only where it matched,
    i.e. where that join's ON clause holds; the first table and the tables joined by RIGHT or
    FULL joins (kept unmatched) have no such gate.
    """
    if position == 0 or joins[position - 1].kind not in ("inner", "left"):
        return TRUE
    return truths[position]


def _union_columns(a: set[str] | None, b: set[str] | None) -> set[str] | None:
    """Unite two column sets (None: all columns)."""
    return None if a is None or b is None else a | b
