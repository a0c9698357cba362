"""Views relative to the subscriber's own entity, resolved at the relay (CA 3197003 [0072]).

``Relative(42, Sphere((0, 0), 50))`` is "within 50 of entity 42": the relay looks 42 up in its
state at every push (why an entity primitive: docs/architecture.md, "Inside the relay"). Rules:

1. **Following.** Each followed entity is an *entity primitive* upstream (the row of that key),
   acquired with the view, released by housekeeping once no view follows it, never pruned.
2. **Resolving.** Each push translates the inner view to the entity's position in the active
   buffer (``Relative.resolve``) and is cut at that same tick; rows the moved view left are
   ``left``.
3. **Coverage.** The resolved view is covered like an absolute one: at each swap a view that
   left what is held acquires more through the planner, widened by its margin; until covered
   (and the entity primitive ready) the subscription is parked.
4. **Absence.** A ready entity primitive with no row (or one the publisher refused) ends the
   subscription with ``Error{entity_not_held}``, as a ``relative_to`` transform does.
"""

from __future__ import annotations

from collections.abc import Iterable

from fanout.errors import InvalidView
from fanout.relay.core.transforms import EntityNotHeld
from fanout.relay.core.upstream import Primitive, Upstream
from fanout.relay.data.intake import DatasetState
from fanout.relay.data.pushes import entity_position
from fanout.views import View
from fanout.views.entity import Entity
from fanout.views.region import (
    AbsoluteRegion,
    Box,
    Intersection,
    RegionUnion,
    Relative,
    Sector,
    Sphere,
)
from fanout.wire.columns import STRING


def check(view: Relative, state: DatasetState) -> None:
    """Refuse a relative view whose entity key is not of the dataset's key type.

    Raises:
        InvalidView: an integer entity for string keys, or the other way round.
    """
    info = state.info
    key_is_str = info.columns[info.key] == STRING
    if isinstance(view.entity, str) != key_is_str:
        kind = "a string" if key_is_str else "an integer"
        raise InvalidView(f"{view}: keys of dataset {info.name!r} are {kind}")


def locate(view: Relative, state: DatasetState) -> AbsoluteRegion | None:
    """The view resolved at the entity's position in the active buffer (None: not held there).

    An entity whose coordinates are not finite has no position: None too.
    """
    position = entity_position(state.buffer, view.entity, state.info.index_columns)
    if position is None:
        return None
    try:
        return view.resolve(position)
    except InvalidView:
        return None


def region(view: Relative, state: DatasetState, upstream: Upstream) -> AbsoluteRegion | None:
    """The region to push now (rule 2), or None while the entity primitive is not ready.

    Raises:
        EntityNotHeld: the entity primitive is ready and the entity is not in the active
            buffer, or the relay holds no entity primitive (the publisher refused it).
    """
    name = state.info.name
    prim = upstream.entity(name, view.entity)
    if prim is None:
        raise EntityNotHeld(
            f"entity {view.entity!r} of {name!r} cannot be followed: the publisher refused to"
            " send this relay its row"
        )
    if not prim.ready:
        return None
    if entity_position(state.buffer, view.entity, ()) is None:
        tick = state.buffer.stamp.tick if state.buffer.stamp else -1
        raise EntityNotHeld(
            f"entity {view.entity!r} of {name!r} does not exist at tick {tick}: the view"
            f" {view} has no position"
        )
    return locate(view, state)


def needed(views: Iterable[View], state: DatasetState) -> list[AbsoluteRegion]:
    """The absolute regions ``views`` need held now: relative ones resolved where they can be."""
    regions: list[AbsoluteRegion] = []
    for view in views:
        if isinstance(view, Relative):
            resolved = locate(view, state)
            if resolved is not None:
                regions.append(resolved)
        elif isinstance(view, Box | Sphere | Sector | RegionUnion | Intersection):
            regions.append(view)
    return regions


def spare_entities(prims: Iterable[Primitive], views: Iterable[View]) -> set[int]:
    """The entity primitives among ``prims`` that no relative view in ``views`` follows, and
    no relay below holds (an entity among ``views``: pinned for it)."""
    followed = {Entity(view.entity) for view in views if isinstance(view, Relative)}
    followed |= {view for view in views if isinstance(view, Entity)}
    return {p.prim for p in prims if isinstance(p.view, Entity) and p.view not in followed}
