"""Choosing a relay for a view, so that subscribers of the same area meet at the same relay.

A relay shares data between the subscribers it serves (founding document 000: relays
"specialised to a set of views with a high degree of overlap"), which gains nothing if a load
balancer puts two subscribers of one place on different relays. :func:`rank` orders relays for
a view by rendezvous (highest-random-weight) hashing of the view's *area* — the cell of a grid
of side ``side`` holding the centre of the view's bounding box —, of its text if it has no
place, of its entity if it is relative to one, or of a routing ``key`` the caller gives: every
subscriber with the same relay list then picks the same relay first, and the same one next if
that one is gone. Why, and how to choose ``side`` or a key: docs/deploy.md, "Which relay a
subscriber uses".
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

from fanout.errors import InvalidView
from fanout.views import Box, Relative, Sector, Sphere, View, to_text
from fanout.views.region import RegionUnion

#: Default side of the routing grid, in world units.
DEFAULT_SIDE = 256.0


def area(view: View, side: float = DEFAULT_SIDE) -> str:
    """The area ``view`` is routed by: a grid cell for a region, else the view itself.

    Raises:
        InvalidView: ``side`` is not a positive finite number.
    """
    if not (math.isfinite(side) and side > 0):
        raise InvalidView(f"routing side {side!r} must be a positive number of world units")
    if isinstance(view, Relative):
        return f"entity:{view.entity!r}"
    if isinstance(view, Box | Sphere | Sector | RegionUnion):
        bounds = view.bounds()
        scaled = ((lo + hi) / 2 / side for lo, hi in zip(bounds.lo, bounds.hi, strict=True))
        cell = ",".join(str(math.floor(q)) if math.isfinite(q) else "inf" for q in scaled)
        return f"cell:{cell}"
    return f"view:{to_text(view)}"


def rank(
    relays: Sequence[str], view: View, side: float = DEFAULT_SIDE, key: str | None = None
) -> list[str]:
    """``relays`` in the order a subscriber of ``view`` should try them (distinct, first best).

    Args:
        relays: the relays' URLs (or any stable names).
        view: the view; routed by its area (see :func:`area`) unless ``key`` is given.
        side: the routing grid's side, in world units.
        key: route by this key instead: every view with the same key meets at one relay.

    Raises:
        InvalidView: no relays, a bad ``side`` or an empty ``key``.
    """
    distinct = list(dict.fromkeys(relays))
    if not distinct:
        raise InvalidView("no relays to route to")
    if key is not None and not key:
        raise InvalidView("a routing key must not be empty")
    hashed = area(view, side) if key is None else f"key:{key}"
    return sorted(distinct, key=lambda relay: _weight(hashed, relay), reverse=True)


def _weight(key: str, relay: str) -> int:
    digest = hashlib.blake2b(f"{key}\x00{relay}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")
