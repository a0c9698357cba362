"""Per-view access rules: what a subscriber may see is its view intersected with its rules.

A token's ``rules`` claim (``fanout.auth``) lists, per dataset, views in the dataset's language.
With a rules claim, a dataset it does not name is not readable at all, and a view of one it
names is served as its **effective view**: a view of the same language, computed in the coverage
algebra before the relay's core sees the subscription, so nothing outside the rules is cut or
encoded. Each view language says how (a :class:`RulesPart`, named by its
``views.registry.Language.rules``; ``relay/core/languages/``); this module names no language's
views. What each language's views become: docs/security.md, "Access rules".

Refusals are ``Unauthorized("forbidden", ...)``; rules that do not parse as views of the
dataset's language are refused the same way, naming the dataset and the rule's number.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

import msgspec

from fanout.errors import InvalidView, Unauthorized
from fanout.views import View, covers, registry
from fanout.views.anyof import AnyOf, members_of
from fanout.views.text import parse as parse_view
from fanout.wire.messages import Subscribe

T = TypeVar("T")
#: Rules by dataset, as a token's claim holds them: view texts.
Rules = Mapping[str, Sequence[str]]


class Outside(Unauthorized):
    """A view (or a member of one) that no rule meets: it grants nothing of it."""

    def __init__(self, message: str) -> None:
        super().__init__("forbidden", message)


class RulesPart:
    """What access rules ask a view language (``views.registry.Language.rules``); this class's
    answers are those of a language that has none: rules parsed as its views, a view inside
    them served as it is, any other refused."""

    def rule(self, dataset: str, text: str, language: str) -> View:
        """A rule of ``dataset`` as a view of its ``language``.

        Raises:
            InvalidView: it is not one.
        """
        return parse_view(text, language)

    def names_datasets(self, view: View) -> bool:
        """Whether ``view`` names the datasets it reads itself (a SQL query): it is restricted
        by the rules of each (:meth:`across`), not by the subscribed dataset's."""
        return False

    def across(self, view: View, rules: Rules) -> View:
        """A view that names its datasets, restricted by the rules of each; a language that
        says its views name datasets and cannot restrict them across those refuses them."""
        raise Unauthorized(
            "forbidden", f"the view {view} reads several datasets, and rules cannot restrict it"
        )

    def served(self, view: View, granted: Sequence[View], dataset: str) -> View:
        """The effective view of ``view`` under the rules ``granted`` on ``dataset``."""
        if covers(granted, view):
            return view
        return self.narrow(view, granted, dataset)

    def narrow(self, view: View, granted: Sequence[View], dataset: str) -> View:
        """``view``, not inside the rules ``granted``, narrowed to them."""
        raise Unauthorized("forbidden", f"the view {view} is not inside your rules on {dataset!r}")


_GENERIC = RulesPart()


def _part(view: View) -> RulesPart:
    part: RulesPart | None = registry.part_for(view, "rules")
    return _GENERIC if part is None else part


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
    if isinstance(view, AnyOf):
        granted = _granted(dataset, kind, rules)
        return view if covers(granted, view) else _narrow_each(view, dataset, kind, rules)
    part = _part(view)
    if part.names_datasets(view):
        return part.across(view, rules)
    return part.served(view, _granted(dataset, kind, rules), dataset)


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
    part: RulesPart | None = registry.part_of_language(kind, "rules")
    language = _GENERIC if part is None else part
    views: list[View] = []
    for number, text in enumerate(texts, 1):
        try:
            views.append(language.rule(dataset, text, kind))
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
    if request.dataset not in rules and not _part(request.view).names_datasets(request.view):
        raise Unauthorized("forbidden", f"your token grants no rows of dataset {request.dataset!r}")
    index = datasets.get(request.dataset)
    if index is None:
        return request  # the core refuses a dataset it does not know, naming those it does
    kind = registry.language(index)
    view = effective(request.view, request.dataset, kind, rules)
    return request if view == request.view else msgspec.structs.replace(request, view=view)
