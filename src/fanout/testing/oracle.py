"""Brute-force membership of 2-D regions by plain comparisons: the oracle that views' own
``match`` and the relay's access rules are tested against; and of a topic in an MQTT filter,
level by level (``filter_matches``).

``inside(shape, x, y)`` reads a box, a disc, a union or an intersection by its definition;
``grid_points(high)`` are the points every half unit around a grid of shapes with corners and
centres on ``0..high`` (``fanout.testing.strategies.grid_boxes``, ``grid_discs``): on, between
and just outside their edges.
"""

from __future__ import annotations

from fanout.views import Box, Sphere
from fanout.views.region import Intersection, RegionUnion


def in_box(box: Box, x: float, y: float) -> bool:
    """Whether (x, y) lies in ``box``, edges included."""
    return box.lo[0] <= x <= box.hi[0] and box.lo[1] <= y <= box.hi[1]


def in_disc(disc: Sphere, x: float, y: float) -> bool:
    """Whether (x, y) lies in ``disc``, its circle included."""
    (cx, cy), r = disc.center, disc.radius
    return (x - cx) ** 2 + (y - cy) ** 2 <= r * r


def inside(shape: object, x: float, y: float) -> bool:
    """Whether (x, y) lies in a box, a disc, a union's members or all of an intersection's
    parts."""
    if isinstance(shape, RegionUnion):
        return any(inside(member, x, y) for member in shape.members)
    if isinstance(shape, Intersection):
        return all(inside(part, x, y) for part in shape.parts)
    if isinstance(shape, Sphere):
        return in_disc(shape, x, y)
    if isinstance(shape, Box):
        return in_box(shape, x, y)
    raise TypeError(f"no oracle for {type(shape).__name__}")


def grid_points(high: int) -> list[tuple[float, float]]:
    """The points every half unit from -0.5 to ``high + 1`` on both axes."""
    return [(x / 2, y / 2) for x in range(-1, 2 * high + 3) for y in range(-1, 2 * high + 3)]


def filter_matches(text: str, topic: str) -> bool:
    """Whether MQTT topic filter ``text`` matches ``topic``, level by level (MQTT 3.1.1 section
    4.7; ``$`` topics and ``$share/GROUP/`` are the caller's to read)."""
    wanted, levels = text.split("/"), topic.split("/")
    for at, level in enumerate(wanted):
        if level == "#":
            return True
        if at >= len(levels) or level not in ("+", levels[at]):
            return False
    return len(wanted) == len(levels)
