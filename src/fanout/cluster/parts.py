"""The built-in view languages' parts of the relay cluster's map (``cluster.responsibility``,
rule 1), named by their ``views.registry.Language.map``: each says which part of a dataset a
view of its language falls in, or None for the map's default (a hash bucket of its text).
"""

from __future__ import annotations

import itertools
import math

from fanout.cluster.responsibility import TOPIC_DEPTH, MapPart, bucket
from fanout.views import Box, Relative, Sector, Sphere, View
from fanout.views.objects import ObjectPath
from fanout.views.region import RegionUnion
from fanout.views.topic import TopicFilter


class RegionParts(MapPart):
    """A region: the grid cell holding the centre of its bounding box; a view relative to an
    entity: a hash bucket of the entity's key (it moves with the entity)."""

    def part(self, view: View, side: float) -> str | None:
        if isinstance(view, Relative):
            return f"bucket:{bucket(f'entity:{view.entity!r}')}"
        if isinstance(view, Box | Sphere | Sector | RegionUnion):
            bounds = view.bounds()
            cell = ",".join(
                _cell((lo + hi) / 2 / side) for lo, hi in zip(bounds.lo, bounds.hi, strict=True)
            )
            return f"cell:{cell}"
        return None


def _cell(scaled: float) -> str:
    # A view centred beyond the floats' range (a box of -1e308..1e308 has centre 0, but one of
    # 1e308..inf has none) still belongs to one cell.
    return str(math.floor(scaled)) if math.isfinite(scaled) else "inf"


class TopicParts(MapPart):
    """A topic filter: its subtree, the literal levels it starts with, at most ``TOPIC_DEPTH``
    (none for one starting with a wildcard: it spans every subtree)."""

    def part(self, view: View, side: float) -> str | None:
        if not isinstance(view, TopicFilter):
            return None
        subtree = _subtree(view.topic_filter)
        return None if subtree is None else f"topic:{subtree}"


def _subtree(topic_filter: str) -> str | None:
    literal = list(
        itertools.takewhile(lambda level: level not in ("+", "#"), topic_filter.split("/"))
    )
    return "/".join(literal[:TOPIC_DEPTH]) if literal else None


class PathParts(MapPart):
    """An object path: its directory."""

    def part(self, view: View, side: float) -> str | None:
        return f"dir:{view.directory}" if isinstance(view, ObjectPath) else None


REGION = RegionParts()
TOPIC = TopicParts()
PATH = PathParts()
