"""SQL predicates (WHERE and ON clauses) as unions of boxes, under SQL's three-valued logic
(how it serves coverage: docs/concepts.md, "How SQL and topic views are covered"). Rules:

1. Every predicate becomes a :class:`Truth`: the boxes where it is TRUE and where it is FALSE
   (NULL is what is left). ``NOT`` swaps them, ``AND`` and ``OR`` combine them; no complement of
   a union is ever taken.
2. A *field* (a column or an :class:`Atom`, an expression over one table's columns) compared
   with literals (=, <>, <, <=, >, >=, BETWEEN, IN, IS ...) is boxed exactly.
3. Any other predicate over one table is an atom too, narrowed to non-NULL operands when strict,
   and ``LIKE 'prefix%'`` to its prefix.
4. Primitives carry real columns only, so atoms dropped make them over-approximate (``exact``
   False); with atoms the union stays *faithful*.
5. ``a.x = b.y`` across tables stays in the box as an equality; others hold anywhere.
6. Past :data:`MAX_BOXES` a union becomes its bounding box; each side is computed only when
   needed. Fields: ``views.sql.fields``; literals: ``views.sql.literals``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from sqlglot import exp

from fanout.errors import InvalidView
from fanout.views.sql.boxes import box_intersect, hull, simplify
from fanout.views.sql.fields import COMPARISONS, Atom, Field, Fields, QualifiedColumn
from fanout.views.sql.literals import Constant, coerce, constant, plain_text, unparen
from fanout.views.sql.values import (
    EVERYTHING,
    NOT_NULL,
    ONLY_NULL,
    Domain,
    ValueSet,
    compare,
    complement,
    intersect,
    points,
)

MAX_BOXES = 64


Equality = frozenset[Field]

TRUE_VALUE = points("bool", [True])
FALSE_VALUE = points("bool", [False])


@dataclass(frozen=True)
class Conjunct:
    """A box over the fields of several tables, and equalities between columns."""

    box: Mapping[Field, ValueSet]
    equalities: frozenset[Equality] = frozenset()


@dataclass(frozen=True)
class Side:
    """Where a predicate is TRUE (or where it is FALSE): a union of conjuncts.

    ``exact``: the union is exact over real columns (no atoms, equalities or bounding boxes).
    ``faithful``: the union is exact over real columns and atoms (no dropped atoms, no
    equalities between tables, no bounding boxes).
    """

    conjuncts: tuple[Conjunct, ...]
    exact: bool = True
    faithful: bool = True


class Truth:
    """Where a predicate is TRUE and where it is FALSE; each side is worked out when first needed.

    A WHERE clause needs only its TRUE side, and the FALSE side of an OR of ANDs is a product
    that grows exponentially: it is computed only if a NOT turns it into a TRUE side.
    """

    def __init__(self, true: Callable[[], Side], false: Callable[[], Side]) -> None:
        self._make = {True: true, False: false}
        self._sides: dict[bool, Side] = {}

    @classmethod
    def of(
        cls,
        true: tuple[Conjunct, ...],
        false: tuple[Conjunct, ...],
        exact: bool = True,
        faithful: bool = True,
    ) -> Truth:
        """Return a truth whose sides are known, with the same exactness on both."""
        sides = Side(true, exact, faithful), Side(false, exact, faithful)
        return cls(lambda: sides[0], lambda: sides[1])

    @property
    def true(self) -> Side:
        """Where the predicate is TRUE."""
        return self._side(True)

    @property
    def false(self) -> Side:
        """Where the predicate is FALSE."""
        return self._side(False)

    def _side(self, which: bool) -> Side:
        """Return one side, computing it the first time."""
        if which not in self._sides:
            self._sides[which] = self._make[which]()
        return self._sides[which]


_ALL = (Conjunct({}),)
TRUE = Truth.of(_ALL, ())
FALSE = Truth.of((), _ALL)
UNKNOWN = Truth.of((), ())  # a NULL predicate: neither TRUE nor FALSE anywhere

_NODES: dict[str, type[exp.Expr]] = {op: kind for kind, op in COMPARISONS.items()}
# Atoms that are NULL whenever an operand is NULL; listed, not guessed, because a non-strict atom
# wrongly listed here would make a primitive miss rows.
_STRICT = (*COMPARISONS, exp.Between, exp.Like, exp.ILike, exp.Glob, exp.SimilarTo)
_FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_NEGATED = {"=": "<>", "<>": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


# ---------------------------------------------------------------------------------------------
# Combining truths


def and_(a: Truth, b: Truth) -> Truth:
    """Return the truth of ``a AND b``."""
    return Truth(lambda: _product(a.true, b.true), lambda: _union(a.false, b.false))


def or_(a: Truth, b: Truth) -> Truth:
    """Return the truth of ``a OR b``."""
    return Truth(lambda: _union(a.true, b.true), lambda: _product(a.false, b.false))


def not_(a: Truth) -> Truth:
    """Return the truth of ``NOT a``."""
    return Truth(lambda: a.false, lambda: a.true)


def _product(a: Side, b: Side) -> Side:
    """Intersect two unions pairwise."""
    meets: list[Conjunct] = []
    for left in a.conjuncts:
        for right in b.conjuncts:
            box = box_intersect(left.box, right.box)
            if box is not None:
                meets.append(Conjunct(box, left.equalities | right.equalities))
    return _bounded(meets, a, b)


def _union(a: Side, b: Side) -> Side:
    """Unite two unions."""
    return _bounded([*a.conjuncts, *b.conjuncts], a, b)


def _bounded(conjuncts: list[Conjunct], a: Side, b: Side) -> Side:
    """Simplify a union; past MAX_BOXES boxes, replace it by its bounding box (inexact)."""
    exact, faithful = a.exact and b.exact, a.faithful and b.faithful
    if len(conjuncts) > 4 * MAX_BOXES:
        return Side((_hull(conjuncts),), exact=False, faithful=False)  # too many to tidy
    groups: dict[frozenset[Equality], list[Mapping[Field, ValueSet]]] = {}
    for conjunct in conjuncts:
        groups.setdefault(conjunct.equalities, []).append(conjunct.box)
    tidy = tuple(
        Conjunct(box, equalities) for equalities, boxes in groups.items() for box in simplify(boxes)
    )
    if len(tidy) <= MAX_BOXES:
        return Side(tidy, exact, faithful)
    return Side((_hull(tidy),), exact=False, faithful=False)


def _hull(conjuncts: Sequence[Conjunct]) -> Conjunct:
    """Return one conjunct holding them all (their equalities dropped: a bounding box)."""
    return Conjunct(hull([conjunct.box for conjunct in conjuncts]))


def _only(field: Field, values: ValueSet) -> tuple[Conjunct, ...]:
    """Return the union holding the rows whose ``field`` is in ``values``."""
    if values.is_empty():
        return ()
    return (Conjunct({field: values}),)


def equality(left: QualifiedColumn, right: QualifiedColumn) -> Truth:
    """Return the truth of ``left = right`` for columns of two tables (FALSE is not boxed)."""
    both = (Conjunct({left: NOT_NULL, right: NOT_NULL}),)
    equal = (Conjunct({}, frozenset({frozenset({left, right})})),)
    return Truth.of(equal, both, exact=False, faithful=False)


# ---------------------------------------------------------------------------------------------
# Predicates -> truths


class Normaliser:
    """Turns the predicates of one query into :class:`Truth` values.

    Args:
        fields: names the operands predicates compare.
        domains: the domain of every compared field, from :func:`column_domains`.
    """

    def __init__(self, fields: Fields, domains: Mapping[Field, Domain]) -> None:
        self._fields = fields
        self._domains = domains
        self._handlers: dict[type[exp.Expr], Callable[[exp.Expr], Truth]] = {
            exp.And: lambda node: self._chain(node, and_),
            exp.Or: lambda node: self._chain(node, or_),
            exp.Not: lambda node: not_(self.truth(node.this)),
            exp.Null: lambda node: UNKNOWN,
            exp.Boolean: lambda node: TRUE if node.this else FALSE,
            exp.Column: lambda node: self._comparison("=", node, exp.true(), node),
            exp.Between: self._between,
            exp.In: self._in,
            exp.Is: lambda node: self._is(node.this, node.expression, node),
            exp.NullSafeEQ: self._distinct,
            exp.NullSafeNEQ: self._distinct,
            exp.Like: self._like,
        }

    def truth(self, node: exp.Expr) -> Truth:
        """Return where the predicate ``node`` is TRUE and where it is FALSE.

        Raises:
            InvalidView: the predicate names an unknown or ambiguous column, or is an empty IN.
        """
        node = unparen(node)
        op = COMPARISONS.get(type(node))
        if op is not None:
            return self._comparison(op, node.this, node.expression, node)
        handler = self._handlers.get(type(node))
        if handler is not None:
            return handler(node)
        return self._opaque(node, self._strict_fields(node))

    def _chain(self, node: exp.Expr, combine: Callable[[Truth, Truth], Truth]) -> Truth:
        """Combine a chain of ANDs (or ORs) pairwise, level by level.

        A long chain is a deep tree, so it is flattened rather than recursed into; and combining
        neighbours in rounds keeps the unions being combined small until the last rounds.
        """
        truths = [self.truth(operand) for operand in node.flatten()]
        while len(truths) > 1:
            paired = [combine(a, b) for a, b in zip(truths[::2], truths[1::2], strict=False)]
            truths = paired + truths[len(paired) * 2 :]
        return truths[0]

    def _comparison(self, op: str, left: exp.Expr, right: exp.Expr, atom: exp.Expr) -> Truth:
        """Return the truth of ``left <op> right``; ``atom`` is that comparison as a node."""
        left_value, right_value = constant(left), constant(right)
        if _is_null(left_value) or _is_null(right_value):
            return UNKNOWN  # any comparison with NULL is NULL
        left_field, right_field = self._fields.of(left), self._fields.of(right)
        if left_field is not None and right_value is not None:
            return self._field_constant(left_field, op, right_value, atom)
        if right_field is not None and left_value is not None:
            return self._field_constant(right_field, _FLIPPED[op], left_value, atom)
        strict = [field for field in (left_field, right_field) if field is not None]
        if op == "=" and left_field is not None and left_field == right_field:
            return Truth.of(_only(left_field, NOT_NULL), ())  # x = x unless NULL (NaN = NaN too)
        columns = [self._fields.column(left), self._fields.column(right)]
        if op == "=" and columns[0] and columns[1] and columns[0][0] != columns[1][0]:
            return equality(columns[0], columns[1])
        return self._opaque(atom, strict)

    def _field_constant(self, field: Field, op: str, value: Constant, atom: exp.Expr) -> Truth:
        """Box ``field <op> literal``; an atom if the literal has no value in the field's domain."""
        domain = self._domains.get(field, value.domain)
        bound = coerce(value, domain)
        if bound is None:
            return self._opaque(atom, [field])
        true = compare(op, domain, bound)
        false = compare(_NEGATED[op], domain, bound)
        return Truth.of(_only(field, true), _only(field, false), exact=_is_column(field))

    def _between(self, node: exp.Expr) -> Truth:
        """Box ``x [NOT] BETWEEN [SYMMETRIC] low AND high`` as two comparisons."""
        subject, low, high = node.this, node.args["low"], node.args["high"]
        if node.args.get("symmetric") and (_is_null(constant(low)) or _is_null(constant(high))):
            return self._opaque(node, self._strict_fields(node))  # its own NULL rules
        ordered = and_(self._bound(">=", subject, low), self._bound("<=", subject, high))
        if not node.args.get("symmetric"):
            return ordered
        swapped = and_(self._bound(">=", subject, high), self._bound("<=", subject, low))
        return or_(ordered, swapped)

    def _bound(self, op: str, subject: exp.Expr, bound: exp.Expr) -> Truth:
        """Box one comparison of a desugared BETWEEN or IN."""
        atom = _NODES[op](this=subject.copy(), expression=bound.copy())
        return self._comparison(op, subject, bound, atom)

    def _in(self, node: exp.Expr) -> Truth:
        """Box ``x IN (...)``: in one go for literals, else as ORed equalities."""
        items = node.expressions
        if not items:
            raise InvalidView(f"IN () needs at least one value: {node.sql(dialect='duckdb')}")
        values = [constant(item) for item in items]
        field = self._fields.of(node.this) if all(v is not None for v in values) else None
        if field is not None:
            return self._in_list(field, [v for v in values if v is not None], node)
        truth = self._bound("=", node.this, items[0])
        for item in items[1:]:
            truth = or_(truth, self._bound("=", node.this, item))
        return truth

    def _in_list(self, field: Field, values: Sequence[Constant], atom: exp.Expr) -> Truth:
        """Box ``field IN (literals)`` in one go: a NULL in the list leaves it never FALSE."""
        present = [value for value in values if value.value is not None]
        domain = self._domains.get(field, present[0].domain if present else "any")
        bounds = [coerce(value, domain) for value in present]
        if any(bound is None for bound in bounds):
            return self._opaque(atom, [field])
        inside = points(domain, [bound for bound in bounds if bound is not None])
        outside = complement(inside).without_null()
        has_null = len(present) < len(values)
        false = () if has_null else _only(field, outside)
        return Truth.of(_only(field, inside), false, exact=_is_column(field))

    def _is(self, subject: exp.Expr, other: exp.Expr, atom: exp.Expr) -> Truth:
        """Box ``subject IS NULL`` and ``subject IS TRUE/FALSE`` (never NULL themselves)."""
        field = self._fields.of(subject)
        value = constant(other)
        if field is None or value is None:
            return self._opaque(atom, [])
        exact = _is_column(field)
        if value.value is None:
            return Truth.of(_only(field, ONLY_NULL), _only(field, NOT_NULL), exact=exact)
        domain = self._domains.get(field, value.domain)
        bound = coerce(value, domain)
        if bound is None:
            return self._opaque(atom, [])
        inside = points(domain, [bound])
        return Truth.of(_only(field, inside), _only(field, complement(inside)), exact=exact)

    def _distinct(self, node: exp.Expr) -> Truth:
        """Box ``x IS [NOT] DISTINCT FROM literal``: NULL-safe (in)equality."""
        subject, other = node.this, node.expression
        if constant(subject) is not None:
            subject, other = other, subject
        truth = self._is(subject, other, node)
        return not_(truth) if isinstance(node, exp.NullSafeNEQ) else truth

    def _like(self, node: exp.Expr) -> Truth:
        """Box ``x LIKE pattern`` as an atom, narrowed to the strings with the pattern's prefix."""
        subject = self._fields.of(node.this)
        pattern = constant(node.expression)
        if _is_null(pattern):
            return UNKNOWN
        truth = self._opaque(node, self._strict_fields(node))
        if subject is None or pattern is None or not isinstance(pattern.value, str):
            return truth
        prefix = _prefix_range(pattern.value)
        if prefix is None or self._domains.get(subject, "str") != "str":
            return truth
        true = tuple(
            Conjunct({**c.box, subject: intersect(c.box.get(subject, EVERYTHING), prefix)})
            for c in truth.true.conjuncts
        )
        return Truth.of(true, truth.false.conjuncts, exact=False)

    def _opaque(self, atom: exp.Expr, strict: Iterable[Field]) -> Truth:
        """Return the truth of a predicate that cannot be boxed: an :class:`Atom` pseudo-column.

        Args:
            atom: the predicate.
            strict: fields the predicate compares strictly (NULL in, NULL out): where they are
                NULL the predicate is NULL, so it is TRUE or FALSE only where they are not.
        """
        base: dict[Field, ValueSet] = dict.fromkeys(strict, NOT_NULL)
        field = self._fields.atom(atom)
        if field is None:
            return Truth.of((Conjunct(base),), (Conjunct(base),), exact=False, faithful=False)
        true = Conjunct({**base, field: TRUE_VALUE})
        false = Conjunct({**base, field: FALSE_VALUE})
        return Truth.of((true,), (false,), exact=False)

    def _strict_fields(self, node: exp.Expr) -> list[Field]:
        """Return the operands of a strict comparison-like predicate (NULL in, NULL out)."""
        if not isinstance(node, _STRICT):
            return []
        operands = [node.this, node.args.get("expression"), node.args.get("low")]
        fields = (self._fields.of(op) for op in operands if op is not None)
        return [field for field in fields if field is not None]


def _is_column(field: Field) -> bool:
    """Return True if a field is a real column (not an atom)."""
    return isinstance(field[1], str)


def _is_null(value: Constant | None) -> bool:
    """Return True if a literal is NULL."""
    return value is not None and value.value is None


def _prefix_range(pattern: str) -> ValueSet | None:
    """Return the strings starting with a LIKE pattern's literal prefix (None: no useful range).

    A prefix that is not plain text (``'2024%'``) gives no range: its bounds would be read as
    dates or numbers were the column not text.
    """
    cut = min((i for i, char in enumerate(pattern) if char in "%_\\"), default=len(pattern))
    prefix = pattern[:cut]
    upper = _next_string(prefix)
    if not prefix or not plain_text(prefix) or (upper is not None and not plain_text(upper)):
        return None
    if upper is None:
        return compare(">=", "str", prefix)
    return intersect(compare(">=", "str", prefix), compare("<", "str", upper))


def _next_string(prefix: str) -> str | None:
    """Return the least string above every string starting with ``prefix`` (None: no bound)."""
    while prefix:
        code = ord(prefix[-1]) + 1
        if 0xD800 <= code <= 0xDFFF:
            code = 0xE000  # surrogates are not characters: skip to the next one
        if code <= 0x10FFFF:
            return prefix[:-1] + chr(code)
        prefix = prefix[:-1]
    return None


# ---------------------------------------------------------------------------------------------
# Projection onto one table


def project(conjuncts: Iterable[Conjunct], alias: str) -> list[dict[str | Atom, ValueSet]]:
    """Return the boxes over one table's fields that hold every row of ``alias`` in the union.

    Equalities transfer constraints first: ``a.x = b.y`` makes both columns non-NULL and puts the
    intersection of their value sets on each.

    Args:
        conjuncts: a union over the fields of several tables.
        alias: the table alias to project onto.

    Returns:
        A simplified union of boxes over the alias's (unqualified) columns and atoms.
    """
    boxes: list[dict[str | Atom, ValueSet]] = []
    for conjunct in conjuncts:
        box = _transfer(conjunct)
        if box is not None:
            boxes.append({name: values for (owner, name), values in box.items() if owner == alias})
    return simplify(boxes)


def _transfer(conjunct: Conjunct) -> dict[Field, ValueSet] | None:
    """Apply a conjunct's equalities to its box; None if that leaves it empty."""
    box = dict(conjunct.box)
    for group in _classes(conjunct.equalities):
        sets = [box.get(field, EVERYTHING) for field in group]
        if len({values.domain for values in sets} - {"any"}) > 1:
            for field in group:  # incomparable domains: keep only that neither side is NULL
                box[field] = intersect(box.get(field, EVERYTHING), NOT_NULL)
            continue
        merged = NOT_NULL
        for values in sets:
            merged = intersect(merged, values)
        if merged.is_empty():
            return None
        box.update(dict.fromkeys(group, merged))
    return box


def _classes(equalities: Iterable[Equality]) -> list[set[Field]]:
    """Group columns into classes of columns that are equal to each other."""
    classes: list[set[Field]] = []
    for pair in equalities:
        touching = [group for group in classes if group & pair]
        merged = set(pair).union(*touching)
        classes = [group for group in classes if not group & pair] + [merged]
    return classes
