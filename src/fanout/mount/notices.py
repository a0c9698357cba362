"""How a mount tells waiting programs that a file has something to read: libfuse's poll handles
(``poll``/``select``) and PPS notification groups (``/.notify``, ``mount.groups``), both woken
from the link's loop when a file turns readable (``fanout.mount``, rule 7)."""

from __future__ import annotations

import ctypes
import errno
import logging
import select
import threading
from collections.abc import Callable
from dataclasses import dataclass

import mfusepy as fuse  # type: ignore[import-untyped]  # ships no type hints

from fanout.errors import InvalidView
from fanout.mount.groups import Group, Groups

log = logging.getLogger("fanout.mount")

#: The notification object at the mount's root.
NOTIFY = "/.notify"
#: Seconds a blocked read of ``.notify`` waits at a time before looking whether to stop.
WAIT_SLICE = 0.5


@dataclass
class GroupHandle:
    """An open ``/.notify``: its group, and what its reads have still to give."""

    group: Group
    said: bool = False
    pending: bytes = b""
    poll_handle: int | None = None


class Notifications:
    """The open ``/.notify`` handles of a mount and their groups, under the mount's lock."""

    def __init__(self, lock: threading.Lock, stopping: threading.Event) -> None:
        self._told = threading.Condition(lock)  # a group got a line
        self._stopping = stopping
        self._groups = Groups()
        self._handles: dict[int, GroupHandle] = {}

    def holds(self, number: int) -> bool:
        """Whether file handle ``number`` is an open ``/.notify``."""
        with self._told:
            return number in self._handles

    def open(self, number: int, writing: bool) -> None:
        """Open ``/.notify`` as handle ``number``: a new group (EACCES for writing)."""
        if writing:
            log.warning("open of %s for writing refused: it is read only", NOTIFY)
            raise fuse.FuseOSError(errno.EACCES)
        with self._told:
            self._handles[number] = GroupHandle(self._groups.make())

    def member(self, path: str, notify: str, writing: bool) -> tuple[Group, str]:
        """The group and value of an open with ``notify=id:value`` (EINVAL with a logged
        reason when no such group is open, or the open is for writing only)."""
        try:
            if not writing:
                with self._told:
                    return self._groups.member(notify)
            raise InvalidView("notify= tells when a reader has something to read; open to read")
        except InvalidView as error:
            log.warning("open of %s refused: %s", path, error)
            raise fuse.FuseOSError(errno.EINVAL) from error

    def tell(self, group: Group, line: Callable[[], None]) -> None:
        """Queue a line in ``group`` (``line``) and wake its reads and ``poll``."""
        with self._told:
            if group.ended:
                return
            line()
            self._told.notify_all()
            ph = None
            for handle in self._handles.values():
                if handle.group is group:
                    ph, handle.poll_handle = handle.poll_handle, None
        notify_poll(ph)

    def read(self, number: int, size: int) -> bytes:
        """The group's id on the first read, then its lines, blocking until there are some."""
        with self._told:
            handle = self._handles[number]
            if not handle.said:
                handle.said, handle.pending = True, handle.group.id.encode()
            while not handle.pending:
                if handle.group.pending:
                    handle.pending = handle.group.take().encode()
                elif self._stopping.is_set() or handle.group.ended or _interrupted():
                    raise fuse.FuseOSError(errno.EINTR)
                else:
                    self._told.wait(WAIT_SLICE)
            chunk, handle.pending = handle.pending[:size], handle.pending[size:]
        return chunk

    def poll(self, number: int, ph: int | None) -> int:
        """The ``poll`` events of ``/.notify`` handle ``number``; ``ph`` kept to wake."""
        with self._told:
            handle = self._handles[number]
            old = handle.poll_handle
            if ph:
                handle.poll_handle = ph
            ready = not handle.said or bool(handle.pending) or handle.group.pending
        if ph and old != ph:
            destroy_poll_handle(old)
        return select.POLLIN | select.POLLRDNORM if ready else 0

    def release(self, number: int) -> bool:
        """Close handle ``number`` if it is an open ``/.notify`` (its group ends)."""
        with self._told:
            handle = self._handles.pop(number, None)
            if handle is None:
                return False
            self._groups.end(handle.group)
            self._told.notify_all()
        destroy_poll_handle(handle.poll_handle)
        return True


def notify_poll(ph: int | None) -> None:
    """Wake the ``poll`` that handed libfuse's ``ph``, which is then spent."""
    if ph:
        fuse._libfuse.fuse_notify_poll(ctypes.c_void_p(ph))
        destroy_poll_handle(ph)


def destroy_poll_handle(ph: int | None) -> None:
    """Give libfuse's ``ph`` back unused (replaced by a newer one, or its file closed)."""
    if ph:
        fuse._libfuse.fuse_pollhandle_destroy(ctypes.c_void_p(ph))


def _interrupted() -> bool:
    """Whether the caller of this thread's FUSE request was signalled (libfuse, ``intr``)."""
    return bool(fuse._libfuse.fuse_interrupted())
