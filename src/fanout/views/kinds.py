"""The kinds of view and the :data:`View` union of them all (docs/concepts.md, "Views").

Four subscription languages share one protocol: regions (here, in :mod:`fanout.views.region`),
SQL (:mod:`fanout.views.sql`), MQTT topic filters (:mod:`fanout.views.topic`) and QNX PPS object
paths (:mod:`fanout.views.objects`). Each module offers ``parse(text)``, ``covers(have, view)``
and ``residual(have, view)``, and the last three ``meets(a, b)`` (whether two views can share a
row, topic or object); this module tells which one a view belongs to. A fifth kind,
``entity`` (:mod:`fanout.views.entity`), is a relay's upstream primitive, never a subscriber's
view: the row of one key of a space dataset, held for a view relative to that entity.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TypeAlias

from fanout.errors import InvalidView
from fanout.views import entity, objects, sql, topic
from fanout.views.anyof import AnyOf
from fanout.views.region import REGIONS, Box, Intersection, RegionUnion, Relative, Sector, Sphere

View: TypeAlias = (
    Box
    | Sphere
    | Sector
    | RegionUnion
    | Intersection
    | Relative
    | sql.Sql
    | sql.SqlBox
    | topic.TopicFilter
    | objects.ObjectPath
    | AnyOf
    | entity.Entity
)
"""Every view of every kind; a msgspec field of this type decodes any of them by its tag."""

KIND_CLASSES: dict[str, tuple[type, ...]] = {
    "region": REGIONS,
    "sql": (sql.Sql, sql.SqlBox),
    "topic": (topic.TopicFilter,),
    "path": (objects.ObjectPath,),
    "entity": (entity.Entity,),
}
"""The view classes of each kind, by the kind's name on the command line."""

KIND_MODULES: dict[str, ModuleType] = {
    "sql": sql,
    "topic": topic,
    "path": objects,
    "entity": entity,
}
"""The module that parses and covers each non-region kind."""


def kind_of(view: object) -> str:
    """Return the kind of a view: ``region``, ``sql``, ``topic``, ``path`` or ``entity``.

    An ``AnyOf`` is of its members' kind.

    Raises:
        InvalidView: ``view`` is not a view.
    """
    if isinstance(view, AnyOf):
        view = view.views[0]
    for kind, classes in KIND_CLASSES.items():
        if isinstance(view, classes):
            return kind
    raise InvalidView(f"{view!r} is not a view (a region, SQL query, topic filter or path)")


def of_kind(kind: str) -> Callable[[object], list[object]]:
    """Return a function keeping the members of a held collection that are of ``kind``.

    Anything that is not a sequence (a region cover index) holds nothing of another kind.
    """
    classes = KIND_CLASSES[kind]

    def keep(have: object) -> list[object]:
        if not isinstance(have, Sequence):
            return []
        return [item for item in have if isinstance(item, classes)]

    return keep
