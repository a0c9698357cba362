"""Catalog entries as tests write them: the few datasets most tests serve, built in one place.

``AGENTS`` is the two-dimensional ``space`` dataset nearly every relay and publisher test
serves (``id``, ``x``, ``y``); ``agents(kind="<i4")`` adds columns to it, ``sensors()`` is the
``topic`` dataset of the topic tests. A test that needs another dataset writes its own
``DatasetInfo``: these are shorthands, not a second catalog language.
"""

from __future__ import annotations

from fanout.wire.messages import Catalog, DatasetInfo

#: ``agents``'s columns: a 64-bit key and two float coordinates.
AGENT_COLUMNS = {"id": "<i8", "x": "<f8", "y": "<f8"}


def agents(name: str = "agents", *, nullable: tuple[str, ...] = (), **extra: str) -> DatasetInfo:
    """The ``space`` dataset of moving agents keyed by ``id``, indexed on ``x`` and ``y``.

    Args:
        name: the dataset's name.
        nullable: columns that may hold NULL.
        **extra: more columns, name -> numpy dtype string (or ``"str"``), after ``id, x, y``.
    """
    return DatasetInfo(name, "id", AGENT_COLUMNS | extra, "space", ["x", "y"], list(nullable))


def sensors(name: str = "sensors", value: str = "value") -> DatasetInfo:
    """The ``topic`` dataset of readings keyed by their ``topic``, with one float column."""
    return DatasetInfo(name, "topic", {"topic": "str", value: "<f8"}, "topic", ["topic"])


def catalog(*datasets: DatasetInfo) -> Catalog:
    """A ``Catalog`` frame of ``datasets`` (``AGENTS`` alone when none is given)."""
    return Catalog(list(datasets or (AGENTS,)))


#: The dataset most tests serve: ``agents()``.
AGENTS = agents()
