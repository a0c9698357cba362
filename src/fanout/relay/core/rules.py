"""Per-view access rules: what a subscriber may see is its view intersected with its rules.

A token's ``rules`` claim (``fanout.auth``) lists, per dataset, views in the dataset's language
(``views.registry``: the language of its kind). With a rules claim, a dataset it does not name is
not readable at all, and a view of one it names is served as its **effective view**: a view of
the same language, computed here in the coverage algebra before the relay's core sees the
subscription — regions clipped or intersected (a relative view refused), topic filters and
object paths narrowed to the rules they meet (any of several), a SQL query's tables restricted
to their rules' rows (RIGHT and FULL joins refused). docs/security.md ("Access rules") has the
table of what each language's views become. The effective view is an ordinary view: the core
serves it as any other, so nothing outside the rules is cut or encoded.

Refusals are ``Unauthorized("forbidden", ...)``; rules that do not parse as views of the
dataset's language are refused the same way, naming the dataset and the rule's number.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

import msgspec
import sqlglot
import sqlglot.errors
from sqlglot import exp

from fanout.errors import InvalidView, Unauthorized
from fanout.views import View, covers, registry
from fanout.views.anyof import AnyOf, members_of
from fanout.views.objects import ObjectPath
from fanout.views.region import (
    AbsoluteRegion,
    Box,
    Intersection,
    RegionUnion,
    Relative,
    Sector,
    Sphere,
    meet_bounds,
)
from fanout.views.sql import Sql
from fanout.views.text import parse as parse_view
from fanout.views.topic import TopicFilter
from fanout.views.topic import covers as topic_covers
from fanout.wire.messages import Subscribe

T = TypeVar("T")
#: Rules by dataset, as a token's claim holds them: view texts.
Rules = Mapping[str, Sequence[str]]
DIALECT = "duckdb"


def effective(view: View, dataset: str, kind: str, rules: Rules | None) -> View:
    """The view a subscriber with ``rules`` is served for ``view`` of ``dataset``.

    Args:
        view: the view it asked for.
        dataset: the dataset subscribed to.
        kind: the dataset's view language: ``region``, ``sql``, ``topic`` or ``path``.
        rules: the token's rules; None: no rules claim, the view as it is.

    Returns:
        The view intersected with the rules (the view itself when the rules cover it).

    Raises:
        Unauthorized: ``forbidden``: the rules grant no row of a dataset the view reads, the
            intersection is not a view of the language (see the module), or the rules of the
            dataset do not parse.
    """
    if rules is None:
        return view
    if isinstance(view, Sql):
        return restrict_sql(view, rules)
    granted = _granted(dataset, kind, rules)
    if isinstance(view, Relative):
        raise Unauthorized(
            "forbidden",
            f"views relative to an entity are not served under access rules on {dataset!r}:"
            " subscribe to an absolute region inside your rules",
        )
    if isinstance(view, Box | Sphere | Sector | RegionUnion | Intersection):
        return _meet_region(view, _region_rules(granted, dataset), dataset)
    if covers(granted, view):
        return view
    return _narrow(view, granted, dataset, kind, rules)


def _narrow(view: View, granted: Sequence[View], dataset: str, kind: str, rules: Rules) -> View:
    """A topic filter, object path or any of several, not inside the rules, narrowed to them."""
    if isinstance(view, TopicFilter):
        return _narrow_topic(view, granted, dataset)
    if isinstance(view, ObjectPath):
        return _narrow_path(view, granted, dataset)
    if isinstance(view, AnyOf):
        return _narrow_each(view, dataset, kind, rules)
    raise Unauthorized("forbidden", f"the view {view} is not inside your rules on {dataset!r}")


class Outside(Unauthorized):
    """A view (or a member of one) that no rule meets: it grants nothing of it."""

    def __init__(self, message: str) -> None:
        super().__init__("forbidden", message)


def _narrow_each(view: AnyOf, dataset: str, kind: str, rules: Rules) -> View:
    """Any of several views: each narrowed, those no rule meets left out.

    Raises:
        Unauthorized: ``forbidden``: no member meets a rule, or one is refused for another
            reason (that reason).
    """
    served: list[object] = []
    for member in view.views:
        try:
            served.extend(members_of(effective(member, dataset, kind, rules)))
        except Outside:
            continue  # this member's part of the intersection is empty
    if not served:
        raise Outside(f"the view {view} meets none of your rules on {dataset!r}")
    if len(served) == 1:
        return served[0]  # type: ignore[return-value]  # a member: a view of the language
    return AnyOf(tuple(served))  # type: ignore[arg-type]  # members of the view's language


def parse_rules(dataset: str, kind: str, texts: Sequence[str]) -> list[View]:
    """A dataset's rules as views of its language.

    Raises:
        Unauthorized: ``forbidden``: one does not parse (the message says which, by number,
            and why, without quoting it).
    """
    views: list[View] = []
    for number, text in enumerate(texts, 1):
        try:
            if kind == "sql":
                views.append(Sql(_rule_query(dataset, text).sql(dialect=DIALECT)))
            else:
                views.append(parse_view(text, kind))
        except InvalidView as exc:
            raise Unauthorized(
                "forbidden", f"your rule {number} on {dataset!r} is not a valid {kind} view: {exc}"
            ) from None
    return views


def _granted(dataset: str, kind: str, rules: Rules) -> list[View]:
    texts = rules.get(dataset)
    if not texts:
        raise Unauthorized("forbidden", f"your token grants no rows of dataset {dataset!r}")
    return parse_rules(dataset, kind, texts)


# -- regions --------------------------------------------------------------------------------


def _meet_region(view: AbsoluteRegion, rules: Sequence[AbsoluteRegion], dataset: str) -> View:
    """A region view intersected with region rules.

    A view the rules cover: itself. Boxes against boxes: the union of the non-empty box pieces
    (the relay cuts boxes fastest, all of a turn's together). Otherwise an
    :class:`Intersection` of the view and the union of the rules its bounds meet.
    """
    if covers(rules, view):
        return view
    bounds = view.bounds()
    meeting = [rule for rule in rules if rule.dims == view.dims and _near(rule, bounds)]
    if not meeting:
        raise Outside(f"the view {view} lies outside your rules on {dataset!r}")
    theirs = [member for rule in meeting for member in _members(rule)]
    mine = _members(view)
    if all(isinstance(m, Box) for m in (*mine, *theirs)):
        pieces = [
            piece
            for a in mine
            for b in theirs
            if (piece := box_meet(a, b)) is not None  # type: ignore[arg-type]  # boxes, checked
        ]
        if not pieces:
            raise Outside(f"the view {view} lies outside your rules on {dataset!r}")
        return pieces[0] if len(pieces) == 1 else RegionUnion(tuple(pieces))
    if len(meeting) > 1 and any(isinstance(rule, Intersection) for rule in meeting):
        raise Unauthorized(
            "forbidden",
            f"the view {view} meets several of your rules on {dataset!r}, one of them an"
            " intersection (a union of intersections is no region): subscribe to a view"
            " meeting one of them",
        )
    rule = meeting[0] if len(meeting) == 1 else RegionUnion(tuple(theirs))  # type: ignore[arg-type]  # primitives: no intersection among several, checked
    try:
        return Intersection((view, rule))  # type: ignore[arg-type]  # an intersection flattens
    except InvalidView:  # the bounds of the whole do not meet: nothing is granted
        raise Outside(f"the view {view} lies outside your rules on {dataset!r}") from None


def _region_rules(granted: Sequence[View], dataset: str) -> list[AbsoluteRegion]:
    """The rules as absolute regions.

    Raises:
        Unauthorized: ``forbidden``: a rule is relative to an entity (a rule is a fixed place).
    """
    rules: list[AbsoluteRegion] = []
    for number, rule in enumerate(granted, 1):
        if not isinstance(rule, Box | Sphere | Sector | RegionUnion | Intersection):
            raise Unauthorized(
                "forbidden",
                f"your rule {number} on {dataset!r} is not an absolute region (a rule is a"
                " fixed place, not one relative to an entity)",
            )
        rules.append(rule)
    return rules


def _near(region: AbsoluteRegion, bounds: Box) -> bool:
    """Whether a region's bounding box meets ``bounds`` (else it grants nothing of them)."""
    return box_meet(region.bounds(), bounds) is not None


def box_meet(a: Box, b: Box) -> Box | None:
    """The intersection of two boxes (closed: boxes that touch meet in a flat box), or None."""
    if a.dims != b.dims:
        return None
    return meet_bounds([a, b])


def _members(view: View) -> tuple[View, ...]:
    return view.members if isinstance(view, RegionUnion) else (view,)


# -- topics ---------------------------------------------------------------------------------


def _narrow_topic(view: TopicFilter, granted: Sequence[View], dataset: str) -> View:
    """A topic filter intersected with topic rules: the filters matching what it and each rule
    both match (``topic_meet``), one filter or any of several, each keeping its share group."""
    meets: list[str] = []
    for rule in granted:
        if not isinstance(rule, TopicFilter):
            continue
        meet = topic_meet(view.topic_filter, rule.topic_filter)
        if meet is None or _topic_within(meet, meets):
            continue
        meets = [kept for kept in meets if not _topic_within(kept, [meet])] + [meet]
    if not meets:
        raise Outside(f"the filter {view} matches none of your rules on {dataset!r}")
    share = view.share_group
    filters = [TopicFilter(meet if share is None else f"$share/{share}/{meet}") for meet in meets]
    return filters[0] if len(filters) == 1 else AnyOf(tuple(filters))


def _topic_within(meet: str, others: Sequence[str]) -> bool:
    """Whether the filters ``others`` match every topic ``meet`` matches (it adds nothing)."""
    return bool(others) and topic_covers([TopicFilter(o) for o in others], TopicFilter(meet))


def topic_meet(a: str, b: str) -> str | None:
    """The filter matching exactly the topics both MQTT filters match, or None if none does.

    Wildcards meet anything at their level (``+``: one level, ``#``: the rest, including the
    parent level itself, as MQTT 4.7.1.2 has it); topics starting with ``$`` are matched by no
    filter starting with a wildcard (MQTT 4.7.2).
    """
    left, right = a.split("/"), b.split("/")
    if _dollar_against_wildcard(left, right) or _dollar_against_wildcard(right, left):
        return None
    out: list[str] = []
    for index in range(max(len(left), len(right)) + 1):
        x = left[index] if index < len(left) else None
        y = right[index] if index < len(right) else None
        if x == "#":
            return "/".join(out + right[index:])
        if y == "#":
            return "/".join(out + left[index:])
        if x is None or y is None:
            return "/".join(out) if x is None and y is None else None
        if x == "+":
            out.append(y)
        elif y in ("+", x):
            out.append(x)
        else:
            return None
    return "/".join(out)


def _dollar_against_wildcard(levels: list[str], other: list[str]) -> bool:
    return levels[0].startswith("$") and other[0] in ("+", "#")


# -- object paths ---------------------------------------------------------------------------


def _narrow_path(view: ObjectPath, granted: Sequence[View], dataset: str) -> View:
    """An object path narrowed to the scopes of the rules it meets: the object it names, or
    the objects of its directory each rule grants, with the view's options; one path, or any
    of several.

    Raises:
        Unauthorized: ``forbidden``: no rule meets it, or one that does selects attributes or
            values (``f=``) and does not hold the whole view (the intersection of two ``f=``
            selections is no path).
    """
    scopes: list[str] = []
    for number, rule in enumerate(granted, 1):
        if not isinstance(rule, ObjectPath):
            continue
        scope = _scope_meet(view, rule)
        if scope is None:
            continue
        if rule.attributes is not None or rule.filters:
            raise Unauthorized(
                "forbidden",
                f"your rule {number} on {dataset!r} selects attributes or values (f=) and"
                f" holds only part of {view}: subscribe to a view inside it",
            )
        if rule.all and not view.all:
            scopes = [scope]  # the directory's rule grants the view's one object whole
            break
        if scope not in scopes:
            scopes.append(scope)
    if not scopes:
        raise Outside(f"the path {view} meets none of your rules on {dataset!r}")
    options = view.path.partition("?")[2]
    try:
        paths = [ObjectPath(f"{scope}?{options}" if options else scope) for scope in scopes]
    except InvalidView as exc:  # an option of a directory's, such as deltadir, on an object
        raise Unauthorized(
            "forbidden",
            f"the path {view} is narrowed by your rules on {dataset!r} to objects, which its"
            f" options do not fit ({exc}): subscribe to the objects your rules name",
        ) from None
    return paths[0] if len(paths) == 1 else AnyOf(tuple(paths))


def _scope_meet(view: ObjectPath, rule: ObjectPath) -> str | None:
    """The object path (no options) both scopes hold: the directory's ``.all``, one object,
    or None."""
    if view.directory.rstrip("/") != rule.directory.rstrip("/"):
        return None
    if view.all:
        return rule.object_path
    if rule.all or rule.object == view.object:
        return view.object_path
    return None


# -- SQL ------------------------------------------------------------------------------------


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


def visible(datasets: Mapping[str, T], grant: object) -> dict[str, T]:
    """The datasets a connection is told of: those its token's rules name, or all of them
    (no rules claim, or no authentication). A dataset it may not read is not described to it.
    """
    rules = getattr(grant, "rules", None)
    if rules is None:
        return dict(datasets)
    return {name: value for name, value in datasets.items() if name in rules}


def restrict(request: Subscribe, rules: Rules | None, datasets: Mapping[str, str]) -> Subscribe:
    """A subscription request with its view replaced by the effective view.

    Args:
        request: the ``Subscribe`` as the subscriber sent it.
        rules: its token's rules (None: none, the request as it is).
        datasets: the relay's datasets, name -> index kind (``space``, ``sql``, ...).

    Raises:
        Unauthorized: ``forbidden`` (see :func:`effective`).
    """
    if rules is None:
        return request
    if request.dataset not in rules and not isinstance(request.view, Sql):
        raise Unauthorized("forbidden", f"your token grants no rows of dataset {request.dataset!r}")
    index = datasets.get(request.dataset)
    if index is None:
        return request  # the core refuses a dataset it does not know, naming those it does
    kind = registry.language(index)
    view = effective(request.view, request.dataset, kind, rules)
    return request if view == request.view else msgspec.structs.replace(request, view=view)
