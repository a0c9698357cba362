"""Views relative to the subscriber's own entity, resolved at the relay (CA 3197003 [0072]).

``Relative(42, Sphere((0, 0), 50))`` is "within 50 of entity 42": the subscriber does not say
where 42 is; the relay looks it up in its state at every push ([0072]: "the intermediary
process can determine the subscriber process's current position from the state data store").

Rules:

1. **Following.** For every entity a relative view follows, the relay holds an *entity
   primitive* upstream (:class:`~fanout.views.entity.Entity`: the row of that key, wherever it
   is), acquired when the view is subscribed and released by housekeeping once no view follows
   the entity. Its row is never pruned while it is held.
2. **Resolving.** Each push reads the entity's position from the active buffer (its row's index
   columns) and translates the inner view to it (``Relative.resolve``); the push is cut from
   that absolute region at the same tick as the position, so view and rows are one consistent
   cut, and its delta against what the subscriber holds makes rows the moved view left ``left``.
3. **Coverage.** The resolved view is covered like an absolute one. At each swap the relay
   resolves every relative view of the dataset and, when the view has left what is held (ready
   or not), acquires more through the planner, widened by its margin: the entity can move that
   far before the relay asks again (hysteresis). What the view left behind is released by
   housekeeping after the grace period. Until ready primitives cover the resolved view (and
   the entity primitive is ready) the subscription is parked and gets no push.
4. **Absence.** When the entity primitive is ready but the active buffer has no row of that
   key, the entity does not exist (or was deleted): the relay answers ``Error`` with code
   ``entity_not_held`` and ends the subscription, as a ``relative_to`` transform does
   (``relay.core.transforms.EntityNotHeld``). So it does when the publisher refused the entity
   primitive.

**Why an entity primitive (bootstrapping).** The relay must find the entity before it knows
where to look. The only *region* sure to contain an entity of unknown position is the whole
world: one subscriber would make its relay hold, and the publisher stream to it, every row of a
world that may be huge — the load the relays exist to avoid. Searching outwards from a guess is
unbounded too, and a region that happens to hold the entity today loses it when it jumps away,
or when the view does not contain the entity at all (``rel:42:box:100,100,200,200``). So space
datasets also take a keyed primitive, matched at the publisher by a broadcast equi-join on the
key next to the regions' join (``publisher.matching.regions``). Its snapshot is the entity's row
— empty if there is none, which is how rule 4 knows — and its changes follow the entity wherever
it goes. It costs the publisher one row per followed entity, shared by every subscriber of the
relay that follows it.
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
