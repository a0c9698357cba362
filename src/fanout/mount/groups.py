"""PPS notification groups on a mount (``/.notify`` and ``?notify=id:value``; docs/objects.md,
"Open options"): which members of a group have something to read, as the lines a read of
``.notify`` gives. Pure: no threads, no I/O (``mount.files`` waits on it). Rules:

1. Opening ``/.notify`` makes a group; the handle's first read gives the group's id.
2. A file opened with ``?notify=id:value`` is a member: each time it turns readable the group
   queues ``id:value``; when it is closed, ``-id:value``.
3. A line already queued is not queued twice (PPS promises no line per change: a member is read
   until it has nothing new), so a group holds at most two lines per value.
4. Closing the ``.notify`` handle ends its group; its members stay open, telling no one.
"""

from __future__ import annotations

import itertools

from fanout.errors import InvalidView


class Group:
    """One notification group: its id and its queued lines (rules 2 and 3)."""

    def __init__(self, number: int) -> None:
        self.id = str(number)
        self._lines: dict[str, None] = {}  # an ordered set
        self.ended = False

    @property
    def pending(self) -> bool:
        """Whether a read of ``.notify`` would give lines."""
        return bool(self._lines)

    def tell(self, value: str) -> None:
        """A member opened with ``notify=id:value`` has something to read."""
        self._lines.setdefault(f"{self.id}:{value}\n")

    def closed(self, value: str) -> None:
        """A member was closed."""
        self._lines.setdefault(f"-{self.id}:{value}\n")

    def take(self) -> str:
        """The queued lines, oldest first; the queue is emptied."""
        text = "".join(self._lines)
        self._lines.clear()
        return text


class Groups:
    """A mount's notification groups, by id (rules 1 and 4)."""

    def __init__(self) -> None:
        self._groups: dict[str, Group] = {}
        self._numbers = itertools.count(1)

    def make(self) -> Group:
        """A new group (``/.notify`` was opened)."""
        group = Group(next(self._numbers))
        self._groups[group.id] = group
        return group

    def end(self, group: Group) -> None:
        """The group's ``.notify`` handle was closed."""
        group.ended = True
        self._groups.pop(group.id, None)

    def member(self, notify: str) -> tuple[Group, str]:
        """The group and value of a ``notify=id:value`` option.

        Raises:
            InvalidView: no open group has that id.
        """
        number, _, value = notify.partition(":")
        group = self._groups.get(number)
        if group is None:
            raise InvalidView(
                f"notify={notify!r}: no notification group {number!r} is open on this mount"
                " (open /.notify and read its id first)"
            )
        return group, value
