"""Which relays a write is passed to at once, before Spark's micro-batch carries it (``Written``;
docs/concepts.md, "Two paths"). Pure: the registry's plan and the write's rows in, relay ids out.

Rules:

1. Only a durable write is passed (its ``Publish`` answered ``Published``), and only to a
   dataset whose relays show live writes (``LIVE_KINDS``): a refusal never reaches another
   relay, so the publisher tells no outcome; each relay confirms the write by its ingest
   offset or withdraws it at its deadline.
2. Never back to the relay it came through: that relay showed it already.
3. Per relay, not per subscriber: to each relay holding a primitive of the dataset that
   selects one of the written rows; a write that deletes goes to every relay holding a
   primitive of the dataset (a key alone says nothing of where the row was); a relay holding
   a primitive that does not select rows by their own columns (a SQL view's) gets every write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy.typing as npt

from fanout.publisher.relaytable import Plan
from fanout.views import View
from fanout.views.members import SELECTING, members

#: The dataset kinds (``DatasetInfo.index``) whose relays show a write at once: those with a
#: lens (``relay.kinds.lens``). A write to another is not passed: no relay would show it.
LIVE_KINDS = frozenset({"topic", "path", "sql"})


def recipients(
    plan: Plan,
    origin: int | None,
    upserts: Mapping[str, npt.ArrayLike],
    deletes: bool,
    index: Sequence[str],
) -> list[int]:
    """The relays to pass a write to, in id order (the rules above).

    Args:
        plan: the registry's primitives of the written dataset.
        origin: the relay the write came through (None: a producer's own connection).
        upserts: the written rows, column -> values (every column of the dataset).
        deletes: whether the write deletes keys.
        index: the dataset's index columns (``DatasetInfo.index_columns``).
    """
    return sorted(
        relay
        for relay, prims in plan.prims.items()
        if relay != origin and prims and _touches(list(prims.values()), upserts, deletes, index)
    )


def _touches(
    prims: Sequence[View], upserts: Mapping[str, npt.ArrayLike], deletes: bool, index: Sequence[str]
) -> bool:
    selecting = [view for view in prims if isinstance(view, SELECTING)]
    if deletes or len(selecting) < len(prims):
        return True
    return bool(upserts) and any(bool(members(v, upserts, index).any()) for v in selecting)
