"""Reading objects in PPS modes: full, delta with a change status per reader, directory notices
(US 9,026,567, QNX PPS; docs/objects.md). Rules:

1. A subscriber's copy of a view is an ``ObjectStore`` fed each push (:func:`apply_push`), which
   yields notices: ``+@name`` created, ``-@name`` deleted, ``@name`` with the changed attributes,
   ``-attr`` deleted ones. Directories, markers, quality or persistence alone make none.
2. Full mode: one consistent version of the object (or directory, in name order), from one push.
3. Delta mode: each reader has its :class:`ChangeStatus`; its first read is full, later ones the
   notices since: every change of each attribute, in order (one object's consecutive changes
   share a block only where they name different attributes).
4. A change status holds at most ``backlog`` bytes of text (PPS's default, 256 KiB); past that
   it drops its queue and its next read is ``|@name`` (PPS's purge notification) then full.
5. ``deltadir`` (a directory's ``.all``): only ``+@name`` and ``-@name``; the first read names
   every object with ``+@name``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fanout.views.objects.store import (
    DIRECTORY_MARK,
    OBJECT_MARK,
    ObjectStore,
    cell_of,
    directory_of,
    split_key,
)
from fanout.views.objects.text import (
    Changed,
    Created,
    Deleted,
    Notice,
    Overflowed,
    Value,
    format_notices,
    format_object,
)

#: Bytes of queued text a delta reader may hold (PPS's default ``backlog``, 256 KiB).
DEFAULT_BACKLOG = 256 * 1024


def name_of(path: str) -> str:
    """An object's name: the last segment of its path."""
    return path.rsplit("/", 1)[1]


def apply_push(
    store: ObjectStore, upserts: Iterable[Mapping[str, Any]], deletes: Iterable[str]
) -> list[Notice]:
    """Lay a push's cells over ``store`` and say what changed (rule 1)."""
    notices: list[Notice] = []
    deleted_objects: set[str] = set()
    gone: list[tuple[str, str]] = [split_key(key) for key in deletes]
    for path, attr in gone:
        if attr == OBJECT_MARK and store.is_object(path):
            deleted_objects.add(path)
    changed: dict[str, dict[str, Value | None]] = {}
    for path, attr in gone:
        if path in deleted_objects or attr in (OBJECT_MARK, DIRECTORY_MARK):
            continue
        if store.cells.get(f"{path}?{attr}") is not None:
            changed.setdefault(path, {})[attr] = None
    notices += [Deleted(name_of(path)) for path in sorted(deleted_objects)]
    rows = list(upserts)
    for row in rows:
        cell = cell_of(row)
        held = store.cells.get(cell.key)
        if cell.attr == OBJECT_MARK and held is None:
            notices.append(Created(name_of(cell.object)))
        elif cell.attr not in (OBJECT_MARK, DIRECTORY_MARK) and (
            held is None or held.value != cell.value
        ):
            changed.setdefault(cell.object, {})[cell.attr] = cell.value
    store.apply(rows, [f"{path}?{attr}" for path, attr in gone])
    notices += [Changed(name_of(path), attrs) for path, attrs in sorted(changed.items())]
    return notices


def full_text(store: ObjectStore, path: str) -> str:
    """A full read of ``path`` (rule 2): an object, or with ``.all`` every object of a directory.

    Args:
        store: the reader's copy.
        path: ``/dir/obj`` or ``/dir/.all``, without options.
    """
    if name_of(path) == ".all":
        directory = directory_of(path)
        paths = [p for p in store.entries(directory) if store.is_object(p)]
    else:
        paths = [path] if store.is_object(path) else []
    return "".join(format_object(name_of(p), store.attributes(p)) for p in paths)


class ChangeStatus:
    """One reader's change status in delta mode (rules 3 and 4).

    Args:
        backlog: bytes of queued text at most (PPS's ``backlog=``, 256 KiB by default).
        names_only: ``deltadir``: only objects created and deleted, by name (rule 5).
    """

    def __init__(self, backlog: int = DEFAULT_BACKLOG, names_only: bool = False) -> None:
        self.backlog = backlog
        self.names_only = names_only
        self._queue: list[Notice] = []
        self._size = 0
        self._full = True
        self._overflowed = False
        #: Times the queue overflowed and a full read was given instead (rule 4).
        self.overflows = 0

    @property
    def full_next(self) -> bool:
        """Whether the next read is a full one (the first, or after an overflow)."""
        return self._full

    @property
    def pending(self) -> bool:
        """Whether a read would give something."""
        return self._full or bool(self._queue)

    def offer(self, notices: Sequence[Notice]) -> None:
        """Queue a push's notices for this reader, every change of each attribute kept."""
        if self._full:
            return
        for notice in notices:
            if self.names_only and not isinstance(notice, Created | Deleted):
                continue
            last = self._queue[-1] if self._queue else None
            if (
                isinstance(notice, Changed)
                and isinstance(last, Changed)
                and last.name == notice.name
                and not last.attributes.keys() & notice.attributes.keys()
            ):  # one block per object while no attribute would lose a value
                self._queue[-1] = Changed(notice.name, {**last.attributes, **notice.attributes})
                self._size += _text_size(notice) - len(f"@{notice.name}\n")
            else:
                self._queue.append(notice)
                self._size += _text_size(notice)
        if self._size > self.backlog:
            self.overflow()

    def overflow(self) -> None:
        """Drop the queue: the next read is ``|@name`` and a full read (rule 4)."""
        self._queue.clear()
        self._size = 0
        self._full = self._overflowed = True
        self.overflows += 1

    def take(self, store: ObjectStore, path: str) -> str:
        """The text of this reader's next read, and its status cleared (rules 3 to 5)."""
        if self._full:
            said = format_notices([Overflowed(name_of(path))]) if self._overflowed else ""
            self._full = self._overflowed = False
            self._queue.clear()
            self._size = 0
            return said + (names_text(store, path) if self.names_only else full_text(store, path))
        text = format_notices(self._queue)
        self._queue.clear()
        self._size = 0
        return text


def names_text(store: ObjectStore, path: str) -> str:
    """A first ``deltadir`` read of ``/dir/.all``: ``+@name`` for each object (rule 5)."""
    directory = directory_of(path)
    names = [name_of(p) for p in store.entries(directory) if store.is_object(p)]
    return format_notices([Created(name) for name in names])


def _text_size(notice: Notice) -> int:
    return len(format_notices([notice]).encode())
