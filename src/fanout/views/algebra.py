"""The coverage algebra: does what a relay holds cover a view, and what is missing?

Founding document [78]-[81] (step S430/S440): before subscribing upstream, the relay checks
whether the subscriptions in its subscriber data store collectively cover the new one, and
subscribes for (at least) the uncovered portion if not; [155]: one way to widen that portion is
an axis-aligned bounding box of everything wanted.

:func:`covers` and :func:`residual` dispatch on the kind of the view. Regions are decomposed here
(:mod:`fanout.views.region.cover`); SQL, topic and object-path views go to their own modules,
each given only the held views of its own kind: a held view of another kind covers nothing.
A union of topic filters or object paths (``AnyOf``) is covered when each member is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from fanout.errors import InvalidView
from fanout.views.anyof import AnyOf
from fanout.views.kinds import KIND_MODULES, View, kind_of, of_kind
from fanout.views.region import REGIONS, Box, enclosing_box
from fanout.views.region.cover import region_covers, region_residual
from fanout.views.region.coverindex import CoverIndex

Have = CoverIndex | Sequence[View]
"""What a relay holds: a cover index of regions, or any sequence of views."""


def covers(have: Have, view: View) -> bool:
    """Whether the views in ``have`` together cover ``view`` (step S430).

    Never True wrongly. For a curved region it may be False when ``have`` covers the view only
    in pieces that meet along a curve (see :mod:`fanout.views.region.cover`).

    Args:
        have: the views held upstream; a :class:`CoverIndex` the relay keeps up to date is
            fastest, a plain sequence is indexed on each call.
        view: the view to serve.

    Raises:
        InvalidView: ``view`` or a region in ``have`` is relative and unresolved, or ``view``
            is not a view.
    """
    if isinstance(view, REGIONS):
        return region_covers(have, view)
    if isinstance(view, AnyOf):
        return all(covers(have, member) for member in view.views)
    kind = kind_of(view)
    return bool(KIND_MODULES[kind].covers(of_kind(kind)(have), view))


def residual(have: Have, view: View) -> list[View]:
    """Return views that, with ``have``, cover ``view`` (step S440's "at least a portion").

    Returns ``[]`` when ``have`` covers the view. For regions: the view itself when nothing
    held meets it, else disjoint boxes, each with a vectorised ``match``.

    Raises:
        InvalidView: as :func:`covers`.
    """
    if isinstance(view, REGIONS):
        return list(region_residual(have, view))
    if isinstance(view, AnyOf):
        return [piece for member in view.views for piece in residual(have, member)]
    kind = kind_of(view)
    return list(KIND_MODULES[kind].residual(of_kind(kind)(have), view))


def bounding_box(views: Iterable[View]) -> Box:
    """Return the smallest axis-aligned box holding every region in ``views`` ([155]).

    Raises:
        InvalidView: no views, a view that is not an absolute region, or mixed 2-D and 3-D.
    """
    boxes = []
    for view in views:
        if not isinstance(view, REGIONS):
            raise InvalidView(f"{view!r} is not a region; only regions have a bounding box")
        boxes.append(view.bounds())
    return enclosing_box(boxes)


def grow(view: View, margin: float) -> View:
    """Return a region of the same shape holding every point within ``margin`` of ``view``.

    Raises:
        InvalidView: ``view`` is not a region, or ``margin`` is negative or not finite.
    """
    if not isinstance(view, REGIONS):
        raise InvalidView(f"{view!r} is not a region; only regions grow by a margin")
    return view.grow(margin)
