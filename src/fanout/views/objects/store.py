"""Objects as cells: the attribute semantics of an ``objects`` dataset (US 9,026,567, QNX PPS;
docs/objects.md). :class:`ObjectStore` is the pure core, requests in, cells out: the publisher
admits every producer request through one, subscribers hold their views in one. Rules:

1. A cell's key is ``object + "?" + attr``; an object has a marker cell (attr ``""``), a
   directory one (attr ``"/"``). The root ``/`` always exists.
2. A write sets the attributes it names, in order; one of lower quality (0-9) than the held one
   is dropped, the rest still applies.
3. Writing an object creates it and its missing parent directories; a directory's name cannot
   be written as an object, nor an object's used as a directory.
4. ``-attr`` deletes an attribute whatever its quality; deleting an object deletes all its cells;
   a directory is removed only when empty.
5. :meth:`ObjectStore.restart` deletes non-persistent (``[n]``) attributes and objects;
   deleting ``obj?*`` the object's non-persistent attributes (a critical writer closed).
6. A request is applied all or nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from fanout.errors import InvalidView, InvalidWrite
from fanout.views.objects.syntax import ALL_OBJECT, parse_path
from fanout.views.objects.text import (
    DeleteAttribute,
    SetAttribute,
    Value,
    WriteLine,
    check_name,
    check_value,
)

KEY = "cell"
OBJECT_MARK = ""
DIRECTORY_MARK = "/"
#: Deleting ``obj?*`` deletes the non-persistent attributes of ``obj`` (PPS's ``critical``).
VOLATILE = "*"
SCHEMA: dict[str, str] = {
    "cell": "string",
    "object": "string",
    "attr": "string",
    "value": "string",
    "encoding": "string",
    "quality": "int",
    "persist": "boolean",
}
"""The columns of an ``objects`` dataset, in order (``publisher.datasets`` column types)."""

Row = dict[str, Any]


class Cell(NamedTuple):
    """One cell: an attribute of an object, or a marker (rule 1)."""

    object: str
    attr: str
    value: Value
    quality: int
    persist: bool

    @property
    def key(self) -> str:
        """The cell's key (rule 1)."""
        return cell_key(self.object, self.attr)

    def row(self) -> Row:
        """The cell as a row of the dataset (``SCHEMA``)."""
        return {
            "cell": self.key,
            "object": self.object,
            "attr": self.attr,
            "value": self.value.text,
            "encoding": self.value.encoding,
            "quality": self.quality,
            "persist": self.persist,
        }


def cell_key(path: str, attr: str) -> str:
    """The key of ``path``'s cell ``attr`` (rule 1)."""
    return f"{path}?{attr}"


def split_key(key: str) -> tuple[str, str]:
    """(path, attr) of a cell key (rule 1).

    Raises:
        InvalidWrite: the key has no ``?``.
    """
    path, mark, attr = key.rpartition("?")
    if not mark:
        raise InvalidWrite(f"cell key {key!r} must be object?attr (rule 1 of views.objects.store)")
    return path, attr


def cell_of(row: Mapping[str, Any]) -> Cell:
    """A dataset row as a cell (the key is recomputed from object and attr)."""
    value = Value(str(row.get("encoding") or ""), str(row.get("value") or ""))
    quality = int(row.get("quality") or 0)
    return Cell(str(row["object"]), str(row["attr"]), value, quality, bool(row["persist"]))


def directory_of(path: str) -> str:
    """The directory holding ``path`` (``/`` at the root)."""
    parent = path.rsplit("/", 1)[0]
    return parent or "/"


def touched(
    upserts: Mapping[str, npt.ArrayLike], index: Sequence[str]
) -> dict[str, npt.NDArray[np.generic]]:
    """The paths a write's rows (column -> values) may change cells of: the objects they name
    and every directory above them, the root aside (rule 3: a write makes missing parents), as
    the index column, sorted. Whoever passes a write on chooses by these (the publisher; a relay
    for the relays below it), so that a view of a parent directory's ``.all`` gets it."""
    paths: set[str] = set()
    for path in np.asarray(upserts.get(index[0], ()), dtype=object).tolist():
        paths.add(str(path))
        while (path := directory_of(str(path))) != "/":
            paths.add(path)
    return {index[0]: np.array(sorted(paths), dtype=object)}


def check_object_path(path: str, what: str = "object") -> str:
    """Return ``path`` if it names an object or directory: absolute, PPS segments, no options.

    Raises:
        InvalidWrite: it does not.
    """
    if "?" in path:
        raise InvalidWrite(f"{what} path {path!r} has open options; name the {what} alone")
    if path == "/":
        raise InvalidWrite(f"the root '/' is a directory, not an {what} name")
    try:
        parsed = parse_path(path)
    except InvalidView as error:
        raise InvalidWrite(str(error).replace("object path", f"{what} path")) from error
    if parsed.object is None:
        raise InvalidWrite(f"{what} path {path!r}: {ALL_OBJECT!r} is not an {what} one can write")
    return path


class Effects(NamedTuple):
    """What one request changed: cells to upsert (rows, in order) and cell keys to delete."""

    upserts: list[Row]
    deletes: list[str]


@dataclass
class _Undo:
    """The cells a request replaced or removed, to put back if it fails (rule 6)."""

    before: dict[str, Cell | None] = field(default_factory=dict)


class ObjectStore:
    """The objects of one dataset, as cells (the rules above)."""

    def __init__(self, cells: Iterable[Cell] = ()) -> None:
        self.cells: dict[str, Cell] = {}
        #: path (object or directory) -> the attrs of its cells, markers included
        self._attrs: dict[str, set[str]] = {}
        #: directory -> paths of the objects and directories directly in it
        self._entries: dict[str, set[str]] = {}
        self._undo: _Undo | None = None
        for cell in cells:
            self._put(cell)

    # -- reading ---------------------------------------------------------------------------------

    def is_object(self, path: str) -> bool:
        """Whether an object named ``path`` exists."""
        return cell_key(path, OBJECT_MARK) in self.cells

    def is_directory(self, path: str) -> bool:
        """Whether a directory named ``path`` exists (the root always does)."""
        return path == "/" or cell_key(path, DIRECTORY_MARK) in self.cells

    def attributes(self, path: str) -> dict[str, Value]:
        """The attributes of object ``path`` (empty if it has none or does not exist)."""
        names = self._attrs.get(path, set()) - {OBJECT_MARK, DIRECTORY_MARK}
        return {name: self.cells[cell_key(path, name)].value for name in names}

    def entries(self, directory: str) -> list[str]:
        """Paths of the objects and directories directly in ``directory``, sorted."""
        return sorted(self._entries.get(directory, ()))

    def objects(self) -> dict[str, dict[str, Cell]]:
        """Every object: path -> attr -> cell (markers left out)."""
        out: dict[str, dict[str, Cell]] = {}
        for cell in self.cells.values():
            if cell.attr == OBJECT_MARK:
                out.setdefault(cell.object, {})
            elif cell.attr != DIRECTORY_MARK:
                out.setdefault(cell.object, {})[cell.attr] = cell
        return out

    # -- requests (rules 2-6) --------------------------------------------------------------------

    def write(self, path: str, lines: Sequence[WriteLine], *, persist: bool = True) -> Effects:
        """Apply one write to object ``path`` (rules 2-4, 6), creating it if needed.

        Args:
            path: the object, e.g. ``/cars/c1``.
            lines: parsed write lines (``text.parse_write``).
            persist: whether the object, if this write creates it, persists (rule 5).

        Raises:
            InvalidWrite: a bad path, a directory's name, or a bad line; nothing is applied.
        """
        return self._request(lambda effects: self._write(path, lines, persist, effects))

    def delete_object(self, path: str) -> Effects:
        """Delete object ``path`` and its attributes (rule 4).

        Raises:
            InvalidWrite: there is no such object.
        """
        return self._request(lambda effects: self._delete_object(path, effects))

    def make_directory(self, path: str) -> Effects:
        """Create directory ``path`` and its missing parents (rule 3); none if it exists.

        Raises:
            InvalidWrite: a bad path, or an object has that name.
        """
        return self._request(lambda effects: self._make_directory(path, effects))

    def remove_directory(self, path: str) -> Effects:
        """Remove the empty directory ``path`` (rule 4).

        Raises:
            InvalidWrite: no such directory, or it is not empty.
        """
        return self._request(lambda effects: self._remove_directory(path, effects))

    def admit(
        self,
        upserts: Sequence[Mapping[str, Any]],
        deletes: Sequence[str],
        then: Callable[[Effects], object] | None = None,
    ) -> Effects:
        """Apply a producer's request given as cells (the wire's ``Publish``), all or nothing.

        Upserts first, in order: a row with attr ``"/"`` makes a directory, ``""`` creates an
        object (its ``persist``), any other sets that attribute at the row's quality. Then
        deletes: ``dir?/`` removes a directory, ``obj?`` an object, ``obj?*`` the object's
        non-persistent attributes (none when it does not exist), ``obj?attr`` an attribute.

        Args:
            then: called with the effects before the request counts as applied (the publisher
                appends them to its log there); if it raises, the request is undone.

        Raises:
            InvalidWrite: any part is bad; nothing is applied.
            Exception: whatever ``then`` raised; nothing is applied.
        """

        def apply(effects: Effects) -> None:
            for row in upserts:
                self._admit_row(row, effects)
            for key in deletes:
                path, attr = split_key(str(key))
                if attr == DIRECTORY_MARK:
                    self._remove_directory(path, effects)
                elif attr == OBJECT_MARK:
                    self._delete_object(path, effects)
                elif attr == VOLATILE:
                    self._purge(path, effects)
                else:
                    self._write(path, [DeleteAttribute(attr)], True, effects)

        return self._request(apply, then)

    def restart(self, then: Callable[[Effects], object] | None = None) -> Effects:
        """Drop the non-persistent objects and attributes (rule 5), as after a restart
        (``then``: as for :meth:`admit`)."""
        gone = [
            cell.key
            for cell in self.cells.values()
            if not cell.persist or not self._persistent_object(cell.object)
        ]
        return self._request(lambda effects: self._remove_all(gone, effects), then)

    def apply(self, upserts: Iterable[Mapping[str, Any]], deletes: Iterable[str]) -> None:
        """Lay already-admitted cells over the store, blindly (a replay, or a subscriber's copy)."""
        for row in upserts:
            self._put(cell_of(row))
        for key in deletes:
            self._remove(key)

    # -- the steps -------------------------------------------------------------------------------

    def _request(
        self, apply: Callable[[Effects], None], then: Callable[[Effects], object] | None = None
    ) -> Effects:
        effects = Effects([], [])
        self._undo = _Undo()
        try:
            apply(effects)
            if then is not None:
                then(effects)
        except BaseException:
            for key, cell in self._undo.before.items():
                self._remove(key)
                if cell is not None:
                    self._put(cell)
            raise
        finally:
            self._undo = None
        return effects

    def _admit_row(self, row: Mapping[str, Any], effects: Effects) -> None:
        for column in ("object", "attr"):
            if not isinstance(row.get(column), str):
                raise InvalidWrite(f"a cell needs a string {column!r}, got {row.get(column)!r}")
        path, attr = str(row["object"]), str(row["attr"])
        persist = row.get("persist", True)
        if not isinstance(persist, bool):
            raise InvalidWrite(f"cell {path}?{attr}: persist must be true or false")
        if attr == DIRECTORY_MARK:
            self._make_directory(path, effects)
        elif attr == OBJECT_MARK:
            self._write(path, [], persist, effects)
        else:
            quality = row.get("quality", 0)
            if not isinstance(quality, int) or isinstance(quality, bool) or not 0 <= quality <= 9:
                raise InvalidWrite(f"attribute {attr!r} of {path}: quality {quality!r} is not 0-9")
            value = Value(str(row.get("encoding") or ""), str(row.get("value") or ""))
            line = SetAttribute(attr, value, quality, persist)
            self._write(path, [line], True, effects)

    def _write(
        self, path: str, lines: Sequence[WriteLine], persist: bool, effects: Effects
    ) -> None:
        check_object_path(path)
        if self.is_directory(path):
            raise InvalidWrite(f"{path} is a directory; write to an object in it")
        if not self.is_object(path):
            self._make_directory(directory_of(path), effects)
            self._set(Cell(path, OBJECT_MARK, Value("", ""), 0, persist), effects)
        for line in lines:
            where = f"attribute {line.name!r} of {path}"
            check_name(line.name, f"{where}: name")
            held = self.cells.get(cell_key(path, line.name))
            if isinstance(line, DeleteAttribute):
                if held is not None:
                    self._drop(held.key, effects)
            elif held is None or line.quality >= held.quality:
                check_value(line.value, where)
                self._set(Cell(path, line.name, line.value, line.quality, line.persist), effects)

    def _delete_object(self, path: str, effects: Effects) -> None:
        if not self.is_object(path):
            raise InvalidWrite(f"there is no object {path} to delete")
        attrs = self._attrs.get(path, set()) - {OBJECT_MARK}
        self._remove_all([cell_key(path, attr) for attr in sorted(attrs)], effects)
        self._drop(cell_key(path, OBJECT_MARK), effects)

    def _purge(self, path: str, effects: Effects) -> None:
        check_object_path(path)
        attrs = sorted(self._attrs.get(path, set()) - {OBJECT_MARK, DIRECTORY_MARK})
        keys = [cell_key(path, attr) for attr in attrs]
        self._remove_all([key for key in keys if not self.cells[key].persist], effects)

    def _make_directory(self, path: str, effects: Effects) -> None:
        if self.is_directory(path):
            return
        check_object_path(path, "directory")
        if self.is_object(path):
            raise InvalidWrite(f"{path} is an object, not a directory")
        self._make_directory(directory_of(path), effects)
        self._set(Cell(path, DIRECTORY_MARK, Value("", ""), 0, True), effects)

    def _remove_directory(self, path: str, effects: Effects) -> None:
        if path == "/" or not self.is_directory(path):
            raise InvalidWrite(f"there is no directory {path} to remove")
        if self._entries.get(path):
            raise InvalidWrite(f"directory {path} is not empty")
        self._drop(cell_key(path, DIRECTORY_MARK), effects)

    def _remove_all(self, keys: Iterable[str], effects: Effects) -> None:
        for key in keys:
            if key in self.cells:
                self._drop(key, effects)

    def _persistent_object(self, path: str) -> bool:
        marker = self.cells.get(cell_key(path, OBJECT_MARK))
        return marker is None or marker.persist

    def _set(self, cell: Cell, effects: Effects) -> None:
        self._remember(cell.key)
        self._put(cell)
        effects.upserts.append(cell.row())

    def _drop(self, key: str, effects: Effects) -> None:
        self._remember(key)
        self._remove(key)
        effects.deletes.append(key)

    def _remember(self, key: str) -> None:
        if self._undo is not None and key not in self._undo.before:
            self._undo.before[key] = self.cells.get(key)

    def _put(self, cell: Cell) -> None:
        self.cells[cell.key] = cell
        self._attrs.setdefault(cell.object, set()).add(cell.attr)
        if cell.attr in (OBJECT_MARK, DIRECTORY_MARK):
            self._entries.setdefault(directory_of(cell.object), set()).add(cell.object)

    def _remove(self, key: str) -> None:
        cell = self.cells.pop(key, None)
        if cell is None:
            return
        attrs = self._attrs.get(cell.object)
        if attrs is not None:
            attrs.discard(cell.attr)
            if not attrs:
                del self._attrs[cell.object]
        if cell.attr in (OBJECT_MARK, DIRECTORY_MARK):
            entries = self._entries.get(directory_of(cell.object))
            if entries is not None:
                entries.discard(cell.object)
                if not entries:
                    del self._entries[directory_of(cell.object)]

    def __iter__(self) -> Iterator[Cell]:
        return iter(list(self.cells.values()))
