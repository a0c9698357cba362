"""Dataset kinds at the relay, one module each, chosen once per dataset from the catalog.

A catalog entry's ``index`` names its kind; ``make`` builds that kind's object for the dataset,
and the core asks it every question whose answer depends on the kind
(``relay.kinds.base.DatasetKind``). A new kind is one new module and one line in ``KINDS``.
"""

from __future__ import annotations

from collections.abc import Callable

from fanout.errors import ProtocolError
from fanout.relay.kinds.base import Accepted, Cut, DatasetKind, Parts
from fanout.relay.kinds.objects import ObjectsKind
from fanout.relay.kinds.path import PathKind
from fanout.relay.kinds.region import RegionKind
from fanout.relay.kinds.sql import SqlKind
from fanout.relay.kinds.topic import TopicKind
from fanout.wire.messages import DatasetInfo

__all__ = ["KINDS", "STATS", "Accepted", "Cut", "DatasetKind", "Parts", "make"]

KINDS: dict[str, Callable[[DatasetInfo, Parts], DatasetKind]] = {
    "space": RegionKind,
    "sql": SqlKind,
    "topic": TopicKind,
    "path": PathKind,
    "objects": ObjectsKind,
}
"""Index kind (``DatasetInfo.index``) -> the class that serves datasets of it."""

STATS: tuple[str, ...] = tuple(
    name for kind in (RegionKind, SqlKind, TopicKind, PathKind, ObjectsKind) for name in kind.STATS
)
"""The counters kinds add to the relay's stats (zero while no dataset of the kind is held)."""


def make(info: DatasetInfo, parts: Parts) -> DatasetKind:
    """The kind object serving dataset ``info`` (its state empty).

    Raises:
        ProtocolError: its index kind is unknown, or the relay cannot hold it.
    """
    kind = KINDS.get(info.index)
    if kind is None:
        raise ProtocolError(
            f"catalog: dataset {info.name!r} has index {info.index!r}, not one of"
            f" {', '.join(sorted(KINDS))}"
        )
    return kind(info, parts)
