"""Dataset kinds at the relay, one module each, chosen once per dataset from the catalog.

A catalog entry's ``index`` names its kind in the registry (``views.registry``); the kind's relay
side (:class:`RelaySide`) makes the object serving the dataset, and the core asks that object
every question whose answer depends on the kind (``relay.kinds.base.DatasetKind``).
"""

from __future__ import annotations

from fanout.relay.kinds.base import Accepted, Cut, DatasetKind, Parts, RelaySide
from fanout.views import registry
from fanout.wire.messages import DatasetInfo

__all__ = ["Accepted", "Cut", "DatasetKind", "Parts", "RelaySide", "make", "stat_names"]


def make(info: DatasetInfo, parts: Parts) -> DatasetKind:
    """The kind object serving dataset ``info`` (its state empty).

    Raises:
        ProtocolError: its index kind is unknown, or the relay cannot hold it.
    """
    side: RelaySide = registry.lookup(info.index, info.name).part("relay")
    return side.serve(info, parts)


def stat_names() -> tuple[str, ...]:
    """The counters kinds add to the relay's stats (zero while no dataset of the kind is held)."""
    sides: list[RelaySide] = list(registry.parts("relay"))
    return tuple(dict.fromkeys(name for side in sides for name in side.stats))
