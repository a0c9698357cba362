"""The dataset kinds, one registration each: what a catalog's ``index`` names (STYLE.md item 14).

A :class:`Kind` names its view language and, for each side that serves it, the part that does
(``"module:name"``), imported by that side alone the first time it looks the kind up: the relay
(``relay.kinds.RelaySide``: the per-dataset object the core asks everything kind-specific) and
the publisher (``publisher.matching.PublisherSide``: its matcher and index columns). Neither
side imports the other. The relay's core, access rules, release, the relay cluster's map, the
publisher's matching and configuration and the client all find a kind here and only here.

The built-in kinds are registered below; others by :func:`register`, or by a package's entry
point in group ``fanout.kinds`` whose object is a :class:`Kind` (loaded at the first lookup).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Literal

from fanout.errors import ProtocolError

Side = Literal["relay", "publisher"]
#: How a publisher's configuration declares a kind's index columns: 2 or 3 numeric coordinates;
#: any columns (every one by default); one string column (the key by default); none, the
#: schema being fixed (``objects``, ``views.objects.store``).
IndexColumns = Literal["coordinates", "any", "name", "fixed"]
#: The entry-point group third-party kinds are registered in.
GROUP = "fanout.kinds"


@dataclass(frozen=True)
class Kind:
    """One dataset kind.

    Attributes:
        index: its name in a catalog (``DatasetInfo.index``) and a publisher's configuration.
        language: the view language its datasets take (``views.text.parse``'s ``kind``).
        relay, publisher: ``"module:name"`` of the part serving it on that side.
        columns: how a publisher's configuration declares its index columns.
    """

    index: str
    language: str
    relay: str
    publisher: str
    columns: IndexColumns = "name"

    def part(self, side: Side) -> Any:
        """The part serving the kind on ``side``, imported now if not yet."""
        module, _, name = getattr(self, side).partition(":")
        return getattr(importlib.import_module(module), name)


_KINDS: dict[str, Kind] = {}
_ENTRY_POINTS: list[bool] = []  # loaded once: [True] after the first lookup


def register(kind: Kind) -> None:
    """Register ``kind`` (replacing one of the same index)."""
    _KINDS[kind.index] = kind


def unregister(index: str) -> None:
    """Forget the kind ``index`` names (nothing if none does)."""
    _KINDS.pop(index, None)


def kinds() -> dict[str, Kind]:
    """Every registered kind, by index name (entry points loaded at the first call)."""
    if not _ENTRY_POINTS:
        _ENTRY_POINTS.append(True)
        for point in entry_points(group=GROUP):
            register(point.load())
    return dict(_KINDS)


def lookup(index: str, dataset: str = "") -> Kind:
    """The kind ``index`` names.

    Raises:
        ProtocolError: none does (naming ``dataset`` and the kinds there are).
    """
    known = kinds()
    kind = known.get(index)
    if kind is None:
        of = f"dataset {dataset!r} has " if dataset else ""
        raise ProtocolError(f"catalog: {of}index {index!r}, not one of {', '.join(sorted(known))}")
    return kind


def language(index: str) -> str:
    """The view language of kind ``index`` (``index`` itself if no kind has that name)."""
    kind = kinds().get(index)
    return index if kind is None else kind.language


def parts(side: Side) -> Iterator[Any]:
    """The part of every registered kind on ``side``, in index order."""
    for index in sorted(kinds()):
        yield _KINDS[index].part(side)


_RELAY, _PUBLISHER = "fanout.relay.kinds", "fanout.publisher.matching"
for _kind in (
    Kind("space", "region", f"{_RELAY}.region:SIDE", f"{_PUBLISHER}.regions:SIDE", "coordinates"),
    Kind("sql", "sql", f"{_RELAY}.sql:SIDE", f"{_PUBLISHER}.sql:SIDE", "any"),
    Kind("topic", "topic", f"{_RELAY}.topic:SIDE", f"{_PUBLISHER}.topics:SIDE"),
    Kind("path", "path", f"{_RELAY}.path:SIDE", f"{_PUBLISHER}.paths:SIDE"),
    Kind("objects", "path", f"{_RELAY}.objects:SIDE", f"{_PUBLISHER}.paths:OBJECTS", "fixed"),
):
    register(_kind)
