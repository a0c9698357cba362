"""Warm handovers, the pure part: a split's giver serves a part it handed over until the part's
new relay holds it ready, so that a moved subscriber waits for its move alone, not for the new
relay's acquisitions upstream (docs/cluster.md, "Split and merge on load"). Rules:

1. **The giver ends them when the assignment is ready**, or ``WAIT`` s after it first read it
   waiting (its member may be an older relay, or may fail).
2. **What the member warms:** the bounding box of the giver's region views in the part; a part
   holding any other view, or none, warms nothing and is ready at once. It is ready once ready
   primitives cover the box and its window holds a seq after they became ready.
3. **The member pins what it warms** until ``HOLD`` s after it was ready (its subscribers came).
4. **A handover under way is a move** to both relays' balancers: neither splits nor merges then
   (the giver still holds the subscriptions, the member none of them yet).
5. **Each ``every`` subscription moves just after a seq**: ended once sent the giver's last
   seq (a micro-batch interval to reach the member), or ``ALIGN`` s after its part is ready;
   until then it is served ahead of the giver's others (``FIRST`` priority levels more).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from fanout.cluster.responsibility import ResponsibilityMap, part_of
from fanout.errors import InvalidView
from fanout.views import View, bounding_box, parse_region, to_text

#: An (epoch, seq) of the publisher's stream.
Stamp = tuple[int, int]

#: Seconds a giver keeps serving a part it handed over that its member does not say is ready.
WAIT = 20.0
#: Seconds a member keeps what it warmed pinned once ready.
HOLD = 30.0
#: Seconds a moving ``every`` subscription may wait to be sent the giver's last seq (rule 5).
ALIGN = 4.0
#: Priority levels a moving ``every`` subscription gains at the giver (rule 5; the scheduler's
#: aging adds 10 a second of waiting): it is sent the giver's last seq ahead of the subscriptions
#: that stay, rather than at the tail of a loaded giver's round, and leaves just after it.
FIRST = 1000.0


def served(
    after: ResponsibilityMap,
    before: ResponsibilityMap,
    me: str,
    now: float,
    since: Mapping[str, float],
    *,
    wait: float = WAIT,
) -> tuple[ResponsibilityMap, dict[str, float]]:
    """The map relay ``me`` ends its held subscriptions by (rule 1), and the parts it waits for.

    Args:
        after: the map as read now.
        before: the map it served by until now (what this function last returned).
        me: the giver's name.
        now: the time now (any clock, the one ``since`` is on).
        since: part -> when ``me`` first read it handed over and waiting.
        wait: ``WAIT``.

    Returns:
        ``after``, but for the parts ``me`` handed over whose assignment is not ready and was
        first read less than ``wait`` ago: those keep their assignment in ``before`` (none:
        their owner by rendezvous); and part -> when first read waiting, for every part ``me``
        handed over that is not ready.
    """
    waiting = {
        part: since.get(part, now)
        for part, held in after.assigned.items()
        if held.giver == me
        and held.member != me
        and not held.ready
        and held.member in after.members
    }
    assigned = dict(after.assigned)
    for part, first in waiting.items():
        if now - first < wait:
            kept = before.assigned.get(part)
            if kept is None:
                del assigned[part]
            else:
                assigned[part] = kept
    return ResponsibilityMap(after.members, after.side, after.standby, assigned), waiting


def unready(
    table: ResponsibilityMap, me: str, now: float, since: Mapping[str, float]
) -> dict[str, float]:
    """Part -> when first read (``since``, else ``now``), for each assignment to or from relay
    ``me`` in ``table`` that is not ready: a handover under way while read less than ``WAIT``
    s ago, which ``splitting`` counts as a move (rule 4)."""
    return {
        part: since.get(part, now)
        for part, held in table.assigned.items()
        if me in (held.member, held.giver) and not held.ready
    }


def warm(held: Iterable[tuple[str, View]], parts: Iterable[str], side: float) -> dict[str, str]:
    """What a relay holding ``held`` subscriptions (dataset, view) has the member it hands
    ``parts`` to warm (rule 2): part -> the text of the bounding box of its views there, for
    the parts that have one."""
    wanted = set(parts)
    views: dict[str, list[View]] = {}
    for dataset, view in held:
        part = part_of(dataset, view, side)
        if part in wanted:
            views.setdefault(part, []).append(view)
    out: dict[str, str] = {}
    for part, those in views.items():
        try:
            box = bounding_box(those)
        except InvalidView:
            continue  # not all regions (rule 2)
        if all(math.isfinite(x) for x in (*box.lo, *box.hi)):
            out[part] = to_text(box)
    return out


def merged_warm(
    held: Iterable[tuple[Mapping[str, float], Mapping[str, str]]], parts: Iterable[str]
) -> dict[str, str]:
    """Rule 2 over the subscriptions of several processes (a relay's workers), each given as
    (part -> how many it holds, ``warm`` of every part it holds): a part warms the bounding box
    of every process's box of it, and nothing if one holds it without a box."""
    wanted = set(parts)
    boxes: dict[str, list[View]] = {}
    bare: set[str] = set()
    for weights, warmed in held:
        for part in wanted.intersection(weights):
            if part in warmed:
                boxes.setdefault(part, []).append(parse_region(warmed[part]))
            else:
                bare.add(part)
    return {part: to_text(bounding_box(views)) for part, views in boxes.items() if part not in bare}


def due(sent: Stamp | None, last: Stamp | None, waited: float, *, align: float = ALIGN) -> bool:
    """Whether a held subscription whose part moved is ended now (rule 5).

    Args:
        sent: the (epoch, seq) its subscriber was last sent (None: not an ``every``
            subscription, or not served yet: it starts again wherever it goes).
        last: the (epoch, seq) of the dataset's state at the giver (None: none yet).
        waited: seconds since its part was ready.
        align: ``ALIGN``.
    """
    return sent is None or last is None or sent >= last or waited >= align
