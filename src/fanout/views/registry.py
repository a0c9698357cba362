"""The dataset kinds, one registration each: what a catalog's ``index`` names (STYLE.md item 14).

A :class:`Kind` names its view language and, for each side that serves it, the part that does
(``"module:name"``), imported by that side alone at its first lookup: the relay's
(``relay.kinds.RelaySide``) and the publisher's (``publisher.matching.PublisherSide``). Neither
side imports the other; every module that serves all kinds finds a kind here and only here.

A :class:`Language` does the same for a view language: its parts outside ``views`` (access
rules, release, the map of relays), by module path; a language without one gets those modules'
generic answer. The built-in kinds and languages are registered below; others by
:func:`register`, or by an entry point in group ``fanout.kinds`` (a :class:`Kind` or a
:class:`Language`, loaded at the first lookup). A walkthrough: docs/architecture.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Literal

from fanout.errors import ProtocolError
from fanout.views.anyof import AnyOf
from fanout.views.kinds import kind_of

Side = Literal["relay", "publisher"]
#: The parts of a view language outside ``views``.
LanguagePart = Literal["rules", "release", "map"]
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


@dataclass(frozen=True)
class Language:
    """One view language's parts outside ``views``.

    Attributes:
        name: its name (``views.kinds.kind_of`` of its views, a :class:`Kind`'s ``language``).
        rules, release, map: ``"module:name"`` of its part in access rules, release and the
            relay cluster's map; empty: none (the generic answer there).
    """

    name: str
    rules: str = ""
    release: str = ""
    map: str = ""

    def part(self, which: LanguagePart) -> Any:
        """Its part ``which``, imported now if not yet (None: it has none)."""
        path = getattr(self, which)
        if not path:
            return None
        module, _, name = path.partition(":")
        return getattr(importlib.import_module(module), name)


_KINDS: dict[str, Kind] = {}
_LANGUAGES: dict[str, Language] = {}
_ENTRY_POINTS: list[bool] = []  # loaded once: [True] after the first lookup
_BY_CLASS: dict[type, str] = {}  # view class -> its language
_PARTS: dict[tuple[str, LanguagePart], Any] = {}  # found parts, forgotten at a registration


def register(kind: Kind | Language) -> None:
    """Register a kind or a view language (replacing one of the same name)."""
    if isinstance(kind, Language):
        _LANGUAGES[kind.name] = kind
        _PARTS.clear()
    else:
        _KINDS[kind.index] = kind


def unregister(index: str) -> None:
    """Forget the kind ``index`` names (nothing if none does)."""
    _KINDS.pop(index, None)


def unregister_language(name: str) -> None:
    """Forget the view language ``name`` (nothing if none is registered under it)."""
    _LANGUAGES.pop(name, None)
    _PARTS.clear()


def _load_entry_points() -> None:
    if not _ENTRY_POINTS:
        _ENTRY_POINTS.append(True)
        for point in entry_points(group=GROUP):
            register(point.load())


def kinds() -> dict[str, Kind]:
    """Every registered kind, by index name (entry points loaded at the first call)."""
    _load_entry_points()
    return dict(_KINDS)


def languages() -> dict[str, Language]:
    """Every registered view language, by name (entry points loaded at the first call)."""
    _load_entry_points()
    return dict(_LANGUAGES)


def view_language(view: object) -> str:
    """The language of ``view`` (``views.kinds.kind_of``: an ``AnyOf`` is of its members'),
    remembered by class: release asks it of every pair of views it compares.

    Raises:
        InvalidView: ``view`` is not a view.
    """
    cls = type(view)
    name = _BY_CLASS.get(cls)
    if name is None:
        name = kind_of(view)
        if cls is not AnyOf:
            _BY_CLASS[cls] = name
    return name


def part_for(view: object, which: LanguagePart) -> Any:
    """The part ``which`` of the language of ``view``, or None: the language registers none.

    Raises:
        InvalidView: ``view`` is not a view.
    """
    return part_of_language(view_language(view), which)


def part_of_language(name: str, which: LanguagePart) -> Any:
    """The part ``which`` of view language ``name``, or None: none is registered."""
    key = (name, which)
    if key not in _PARTS:
        _load_entry_points()
        language = _LANGUAGES.get(name)
        _PARTS[key] = None if language is None else language.part(which)
    return _PARTS[key]


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

_CORE, _MAP = "fanout.relay.core.languages", "fanout.cluster.parts"
for _language in (
    Language("region", f"{_CORE}.region:RULES", "", f"{_MAP}:REGION"),
    Language("sql", f"{_CORE}.sql:RULES", f"{_CORE}.sql:RELEASE"),
    Language("topic", f"{_CORE}.topic:RULES", f"{_CORE}.topic:RELEASE", f"{_MAP}:TOPIC"),
    Language("path", f"{_CORE}.path:RULES", f"{_CORE}.path:RELEASE", f"{_MAP}:PATH"),
):
    register(_language)
