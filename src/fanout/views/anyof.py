"""Any of several views of one language: the union of topic filters, or of object paths.

What a subscriber under access rules is served when its view meets several of its rules, partly
each (``relay.core.rules``): ``plant/+/temp`` against the rules ``plant/1/#`` and ``plant/2/#`` is
``plant/1/temp | plant/2/temp``. A row is in it when any member selects it. At the relay each
member is a need of its own (acquired, covered and released as any view of the language); the
push is the union of the members' rows, each row once.

Its text, for people (``fanout explain``), is its members' texts joined by `` | ``; it is not
read back: a topic filter or an object path may hold ``|`` itself.
"""

from __future__ import annotations

from collections.abc import Iterable

from msgspec.structs import force_setattr

from fanout.errors import InvalidView
from fanout.views.base import ViewBase
from fanout.views.objects import ObjectPath
from fanout.views.topic import TopicFilter

Member = TopicFilter | ObjectPath


class AnyOf(ViewBase, tag="any", frozen=True):
    """The union of two or more topic filters, or of two or more object paths.

    Nested unions are flattened and repeated members dropped (the first kept).

    Raises:
        InvalidView: fewer than two distinct members, a member that is not a topic filter or
            object path, or members of both languages.
    """

    views: tuple[TopicFilter | ObjectPath, ...]

    def __post_init__(self) -> None:
        views = tuple(dict.fromkeys(_flatten(self.views)))
        if len(views) < 2:
            raise InvalidView("any of: needs at least two distinct views")
        language = type(views[0])
        if not all(type(view) is language for view in views):
            raise InvalidView("any of: the views must all be topic filters, or all object paths")
        force_setattr(self, "views", views)

    def __str__(self) -> str:
        return " | ".join(
            view.filter if isinstance(view, TopicFilter) else view.path for view in self.views
        )

    @property
    def language(self) -> type[TopicFilter] | type[ObjectPath]:
        """The class of its members."""
        return type(self.views[0])


def _flatten(views: object) -> Iterable[Member]:
    if isinstance(views, str | bytes) or not isinstance(views, Iterable):
        raise InvalidView(f"any of: views = {views!r} is not a sequence of views")
    for i, view in enumerate(views):
        if isinstance(view, AnyOf):
            yield from view.views
        elif isinstance(view, TopicFilter | ObjectPath):
            yield view
        else:
            raise InvalidView(f"any of: view {i} = {view!r} is not a topic filter or object path")


def members_of(view: object) -> tuple[object, ...]:
    """The members of an ``AnyOf``; any other view alone."""
    return view.views if isinstance(view, AnyOf) else (view,)
