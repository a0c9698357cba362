"""The text syntax of views, as typed on the command line (``fanout explain --view ...``).

Region grammar (whitespace allowed around numbers and separators)::

    region    := "rel:" entity ":" absolute | absolute
    absolute  := union ("&" union)*                  # two or more make an intersection
    union     := primitive ("|" primitive)*          # two or more make a union
    primitive := "box:" numbers                      # x0,y0,x1,y1 | x0,y0,z0,x1,y1,z1
               | "sphere:" numbers                   # cx,cy,r | cx,cy,cz,r
               | "sector:" numbers                   # cx,cy,r,heading,half | cx,cy,cz,r,az,el,half
    entity    := integer | bare-key | JSON string    # bare-key: letters, digits, _ - .

Angles are in radians. ``str(region)`` writes this syntax back, and reading it gives an equal
region. Errors name the offending token and its column (1-based). The other kinds' syntaxes
belong to their modules; :func:`parse` picks one by kind.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TypeAlias, TypeVar

from fanout.errors import InvalidView
from fanout.views import objects, sql, topic
from fanout.views.kinds import View
from fanout.views.region import (
    AbsoluteRegion,
    Box,
    Intersection,
    Primitive,
    Region,
    RegionUnion,
    Relative,
    Sector,
    Sphere,
)

_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_INTEGER = re.compile(r"[+-]?\d+")
_BARE_KEY = re.compile(r"[A-Za-z0-9_.\-]+")
_WORD = re.compile(r"[A-Za-z]+")

Number: TypeAlias = tuple[float, int]
"""A number read from the text, with the column it starts at."""

KINDS = ("region", "sql", "topic", "path")

T = TypeVar("T")


def parse(text: str, kind: str) -> View:
    """Parse a view of the given kind from its text.

    Args:
        text: the view's text.
        kind: ``"region"``, ``"sql"``, ``"topic"`` or ``"path"`` (object path).

    Returns:
        The view.

    Raises:
        InvalidView: an unknown kind, or text that is not a valid view of that kind.
    """
    if kind == "region":
        return parse_region(text)
    if kind == "sql":
        return sql.parse(text)
    if kind == "topic":
        return topic.parse(text)
    if kind == "path":
        return objects.parse(text)
    raise InvalidView(f"unknown view kind {kind!r}; expected one of {', '.join(KINDS)}")


def parse_region(text: str) -> Region:
    """Parse a region from its text, e.g. ``box:0,0,10,10`` or ``rel:42:sphere:0,0,50``.

    Raises:
        InvalidView: the text does not follow the grammar (the message names the offending
            token and its column), or the region it describes is invalid.
    """
    if not isinstance(text, str):
        raise InvalidView(f"region text must be a string, got {text!r}")
    return _Parser(text).region()


def to_text(view: object) -> str:
    """Return the text form of a view of any kind, which :func:`parse` reads back.

    Regions and SQL views print their own syntax; topic filters and object paths are their text.
    """
    if isinstance(view, topic.TopicFilter):
        return view.filter
    if isinstance(view, objects.ObjectPath):
        return view.path
    return str(view)


class _Parser:
    """A cursor over region text; each method consumes one grammar rule."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def region(self) -> Region:
        self._skip_space()
        if self.text.startswith("rel:", self.at):
            self.at += len("rel:")
            entity = self._entity()
            self._expect(":")
            view: Region = Relative(entity, self._relative_region())
        else:
            view = self._absolute()
        self._skip_space()
        if self.at < len(self.text):
            raise self._error(f"unexpected {self._token()!r}")
        return view

    def _relative_region(self) -> Primitive | RegionUnion:
        start = self.at
        region = self._absolute()
        if isinstance(region, Intersection):
            self.at = start
            raise self._error("a relative region is a box, sphere, sector or union, not an '&'")
        return region

    def _absolute(self) -> AbsoluteRegion:
        parts = [self._union()]
        while self._skip_space() == "&":
            self.at += 1
            parts.append(self._union())
        if len(parts) == 1:
            return parts[0]
        return _build(self.text, "intersection", 1, lambda: Intersection(tuple(parts)))

    def _union(self) -> Primitive | RegionUnion:
        members = [self._primitive()]
        while self._skip_space() == "|":
            self.at += 1
            members.append(self._primitive())
        if len(members) == 1:
            return members[0]
        return _build(self.text, "union", 1, lambda: RegionUnion(tuple(members)))

    def _primitive(self) -> Primitive:
        self._skip_space()
        start = self.at
        word = _WORD.match(self.text, self.at)
        name = word.group() if word else ""
        if name not in ("box", "sphere", "sector"):
            raise self._error(
                f"expected box, sphere or sector, found {self._token()!r}"
                if self.at < len(self.text)
                else "expected box, sphere or sector, found the end of the text"
            )
        self.at += len(name)
        self._expect(":")
        numbers = tuple(value for value, _ in self._numbers())
        return _shape(self.text, name, start + 1, numbers)

    def _numbers(self) -> list[Number]:
        numbers = [self._number()]
        while self._skip_space() == ",":
            self.at += 1
            numbers.append(self._number())
        return numbers

    def _number(self) -> Number:
        self._skip_space()
        found = _NUMBER.match(self.text, self.at)
        if found is None:
            raise self._error(f"expected a number, found {self._token()!r}")
        self.at = found.end()
        return float(found.group()), found.start() + 1

    def _entity(self) -> int | str:
        if self.text.startswith('"', self.at):
            return self._quoted_entity()
        found = _BARE_KEY.match(self.text, self.at)
        if found is None:
            raise self._error(f"expected an entity key, found {self._token()!r}")
        self.at = found.end()
        key = found.group()
        return int(key) if _INTEGER.fullmatch(key) else key

    def _quoted_entity(self) -> str:
        try:
            key, end = json.JSONDecoder().raw_decode(self.text, self.at)
        except json.JSONDecodeError as error:
            raise self._error(f"bad quoted entity key ({error.msg})") from error
        self.at = end
        if not isinstance(key, str):
            raise self._error("expected a quoted entity key")
        return key

    def _expect(self, separator: str) -> None:
        if not self.text.startswith(separator, self.at):
            raise self._error(f"expected {separator!r}, found {self._token()!r}")
        self.at += len(separator)

    def _skip_space(self) -> str:
        """Skip whitespace; return the next character ('' at the end)."""
        while self.at < len(self.text) and self.text[self.at].isspace():
            self.at += 1
        return self.text[self.at : self.at + 1]

    def _token(self) -> str:
        """Return the text from the cursor up to the next separator, for error messages."""
        rest = self.text[self.at :]
        found = re.match(r"[^,:|&\s]+|.", rest)
        return found.group() if found else ""

    def _error(self, problem: str) -> InvalidView:
        return InvalidView(f"region {self.text!r}: {problem} at column {self.at + 1}")


# Numbers each shape takes in 2-D and in 3-D.
_COUNTS = {"box": (4, 6), "sphere": (3, 4), "sector": (5, 7)}


def _shape(text: str, name: str, column: int, numbers: tuple[float, ...]) -> Primitive:
    """Build the named shape from its numbers, choosing 2-D or 3-D by how many there are."""
    two, three = _COUNTS[name]
    if len(numbers) not in (two, three):
        raise InvalidView(
            f"region {text!r}: {name} takes {two} numbers (2-D) or {three} (3-D), got "
            f"{len(numbers)} at column {column}"
        )
    dims = 2 if len(numbers) == two else 3
    if name == "box":
        return _build(text, name, column, lambda: Box(numbers[:dims], numbers[dims:]))
    if name == "sphere":
        return _build(text, name, column, lambda: Sphere(numbers[:dims], numbers[dims]))
    return _build(text, name, column, lambda: _sector(dims, numbers))


def _sector(dims: int, numbers: tuple[float, ...]) -> Sector:
    center, radius, rest = numbers[:dims], numbers[dims], numbers[dims + 1 :]
    heading: float | tuple[float, float] = rest[0] if dims == 2 else (rest[0], rest[1])
    return Sector(center, radius, heading, rest[-1])


def _build(text: str, name: str, column: int, make: Callable[[], T]) -> T:
    """Call ``make``; re-raise its InvalidView with the text and the shape's column."""
    try:
        return make()
    except InvalidView as error:
        raise InvalidView(f"region {text!r}: {error} (the {name} at column {column})") from error
