"""Regions in the relay's algebra: access rules (``relay.core.rules``).

A region view is clipped to the rules (boxes against boxes) or intersected with them; a view
relative to an entity is refused, and so is a rule that is one.
"""

from __future__ import annotations

from collections.abc import Sequence

from fanout.errors import InvalidView, Unauthorized
from fanout.relay.core.rules import Outside, RulesPart
from fanout.views import View, covers
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


class RegionRules(RulesPart):
    """Region views against region rules (see the module)."""

    def served(self, view: View, granted: Sequence[View], dataset: str) -> View:
        if isinstance(view, Relative):
            raise Unauthorized(
                "forbidden",
                f"views relative to an entity are not served under access rules on {dataset!r}:"
                " subscribe to an absolute region inside your rules",
            )
        if isinstance(view, Box | Sphere | Sector | RegionUnion | Intersection):
            return _meet_region(view, _region_rules(granted, dataset), dataset)
        return super().served(view, granted, dataset)


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


RULES = RegionRules()
