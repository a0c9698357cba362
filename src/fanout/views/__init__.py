"""Views: what a subscriber asks for, in one of four subscription languages (docs/concepts.md,
"Views").

Regions (boxes, spheres, sectors, unions, regions relative to an entity), SQL queries, MQTT topic
filters and QNX PPS object paths; the coverage algebra that tells a relay whether what it holds
upstream covers a view, and what is missing; their text syntax.
"""

from fanout.views.algebra import bounding_box, covers, grow, residual
from fanout.views.kinds import View, kind_of
from fanout.views.region import Box, Intersection, Region, RegionUnion, Relative, Sector, Sphere
from fanout.views.region.coverindex import CoverIndex
from fanout.views.text import parse, parse_region, to_text

__all__ = [
    "Box",
    "CoverIndex",
    "Intersection",
    "Region",
    "RegionUnion",
    "Relative",
    "Sector",
    "Sphere",
    "View",
    "bounding_box",
    "covers",
    "grow",
    "kind_of",
    "parse",
    "parse_region",
    "residual",
    "to_text",
]
