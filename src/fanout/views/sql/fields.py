"""Fields: what the predicates of a SQL view compare, and the domain each is compared in.

A field is a column (``u.age``) or an :class:`Atom`: an expression or predicate over one table's
columns (``abs(u.age)``, ``u.name LIKE 'a%'``), a pseudo-column to the box algebra. Rules:

1. An expression is an atom if all its columns belong to one table and its value does not change
   between evaluations (not ``random()``, ``now()``).
2. An atom is named by its SQL, columns unqualified and lower case: the same expression over the
   same table is the same atom in every view.
3. All literals compared with one field share a domain; strings compared with a date field read
   as dates. Other mixes are invalid views.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from sqlglot import exp

from fanout.errors import InvalidView
from fanout.views.sql.literals import Constant, constant, unparen
from fanout.views.sql.values import Domain


@dataclass(frozen=True, order=True)
class Atom:
    """An expression or predicate over one table, standing in boxes as a pseudo-column.

    ``text`` is its SQL with its columns unqualified and lower case, so the same
    predicate in two views over the same table is the same atom.
    """

    text: str


QualifiedColumn = tuple[str, str]  # (table alias, column), both lower case
Field = tuple[str, str | Atom]  # a column or an atom of one table alias
Resolve = Callable[[exp.Column], QualifiedColumn | None]

COMPARISONS: dict[type[exp.Expr], str] = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.GT: ">",
    exp.GTE: ">=",
}


class Fields:
    """Names the operands predicates compare: a column, or an expression over one table (atom).

    Args:
        resolve: maps a column reference to its (alias, column); None if it names no single
            column (a COALESCEd USING column of a FULL JOIN).
        aliases: the query's table aliases (an expression without columns belongs to the only
            one, if there is only one).
    """

    def __init__(self, resolve: Resolve, aliases: Sequence[str]) -> None:
        self._resolve = resolve
        self._aliases = aliases

    def column(self, node: exp.Expr) -> QualifiedColumn | None:
        """Return the column ``node`` is, if it is a bare column reference."""
        node = unparen(node)
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
            return self._resolve(node)
        return None

    def of(self, node: exp.Expr) -> Field | None:
        """Return the field ``node`` is: a column, an atom, or None (a literal, several tables)."""
        node = unparen(node)
        if isinstance(node, exp.Column):
            return self.column(node)
        if constant(node) is not None:
            return None
        return self.atom(node)

    def atom(self, node: exp.Expr) -> Field | None:
        """Return an expression over one table as an atom; None if it reads several or varies.

        The atom's text has its columns unqualified, so ``abs(x.i)`` over ``t AS x`` and
        ``abs(i)`` over ``t`` are the same atom. Expressions whose value changes from one
        evaluation to the next (``random()``, ``now()``) are never atoms.
        """
        canonical = unparen(node).copy()
        if any(_volatile(part) for part in canonical.walk()):
            return None
        owners: set[str] = set()
        for reference in list(canonical.find_all(exp.Column)):
            resolved = None if isinstance(reference.this, exp.Star) else self._resolve(reference)
            if resolved is None:
                return None
            owners.add(resolved[0])
            reference.replace(exp.column(resolved[1], quoted=True))
        if not owners and len(self._aliases) == 1:
            owners.add(self._aliases[0])
        if len(owners) != 1:
            return None
        for part in canonical.walk():
            part.comments = None
        return owners.pop(), Atom(canonical.sql(dialect="duckdb"))


_VOLATILE_NODES = (exp.Rand, exp.CurrentTimestamp, exp.CurrentDate, exp.CurrentTime, exp.Uuid)
_VOLATILE_NAMES = frozenset(
    {"now", "random", "nextval", "currval", "setseed", "today", "get_current_time",
     "get_current_timestamp", "transaction_timestamp", "gen_random_uuid", "uuid"}
)  # fmt: skip


def _volatile(node: exp.Expr) -> bool:
    """Return True if ``node`` gives a new value each time it is evaluated."""
    if isinstance(node, _VOLATILE_NODES):
        return True
    return isinstance(node, exp.Anonymous) and str(node.this).lower() in _VOLATILE_NAMES


def field_name(field: Field) -> str:
    """Return a field as messages name it: ``column alias.name`` or the atom's SQL."""
    alias, name = field
    return f"column {alias}.{name}" if isinstance(name, str) else repr(name.text)


# ---------------------------------------------------------------------------------------------
# Domains per field


def column_domains(predicates: Iterable[exp.Expr], fields: Fields) -> dict[Field, Domain]:
    """Settle the domain of every column and atom the predicates compare with literals.

    Args:
        predicates: WHERE and ON clauses of one query.
        fields: names the compared operands.

    Returns:
        The domain each compared field's literals are read in.

    Raises:
        InvalidView: a field is compared with literals of incompatible types (a number and a
            string, say); the message names the field and both literals.
    """
    seen: dict[Field, dict[Domain, str]] = {}
    for predicate in predicates:
        for field, value in _field_constants(predicate, fields):
            if value.domain != "any":
                seen.setdefault(field, {}).setdefault(value.domain, value.text)
    return {field: _unify(field, found) for field, found in seen.items()}


def _unify(field: Field, found: Mapping[Domain, str]) -> Domain:
    """Return the one domain a field's literals are read in, or raise InvalidView."""
    domains = set(found)
    if len(domains) == 1:
        return domains.pop()
    if domains <= {"str", "date"}:
        return "date"
    if domains <= {"str", "date", "timestamp"}:
        return "timestamp"
    first, second = sorted(found.items())[:2]
    raise InvalidView(
        f"{field_name(field)} is compared with values of different types: "
        f"{first[1]} ({first[0]}) and {second[1]} ({second[0]})"
    )


def _field_constants(node: exp.Expr, fields: Fields) -> Iterator[tuple[Field, Constant]]:
    """Yield (field, literal) for every comparison in a predicate's boolean structure."""
    node = unparen(node)
    if isinstance(node, exp.And | exp.Or):
        for operand in node.flatten():  # a loop, not recursion: long chains are deep trees
            yield from _field_constants(operand, fields)
    elif isinstance(node, exp.Not):
        yield from _field_constants(node.this, fields)
    elif isinstance(node, exp.Column):
        column = fields.column(node)
        if column is not None:
            yield column, Constant("bool", True, "TRUE")
    else:
        for subject, other in _operands(node):
            value = constant(other)
            field = fields.of(subject) if value is not None else None
            if field is not None and value is not None:
                yield field, value


def _operands(node: exp.Expr) -> list[tuple[exp.Expr, exp.Expr]]:
    """Return the (subject, compared-with) pairs of a comparison-like atom, both ways round."""
    if isinstance(node, (*COMPARISONS, exp.NullSafeEQ, exp.NullSafeNEQ, exp.Is)):
        return [(node.this, node.expression), (node.expression, node.this)]
    if isinstance(node, exp.Between):
        return [(node.this, node.args["low"]), (node.this, node.args["high"])]
    if isinstance(node, exp.In):
        return [(node.this, item) for item in node.expressions]
    return []
