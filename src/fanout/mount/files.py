"""The FUSE operations of a mounted objects dataset (``fanout.mount``'s rules): lookups, reads in
PPS modes, ``poll``/``select`` readiness, writes, handles. Every network step goes through the
``Link``."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import logging
import os
import select
import stat
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import mfusepy as fuse  # type: ignore[import-untyped]  # ships no type hints

from fanout.client.objects import ObjectFile
from fanout.client.subscriber import SubscriptionError
from fanout.errors import InvalidView, InvalidWrite
from fanout.mount.groups import Group
from fanout.mount.link import STEP_TIMEOUT, Link, Unreachable
from fanout.mount.notices import NOTIFY, Notifications, destroy_poll_handle, notify_poll
from fanout.views.objects import ObjectPath
from fanout.views.objects.reading import name_of
from fanout.views.objects.store import directory_of
from fanout.views.objects.text import parse_write

log = logging.getLogger("fanout.mount")

T = TypeVar("T")

#: Seconds a blocked read waits at a time before looking whether the mount is stopping.
WAIT_SLICE = 0.5


@dataclass
class Handle:
    """One open file: the object it names, its options, and for reads its subscription."""

    path: str
    """The object path (or ``dir/.all``), without options."""
    view: ObjectPath
    writing: bool
    file: ObjectFile | None = None
    generation: int = -1
    pending: bytes = b""
    snapshot: bytes | None = None
    closed: bool = False
    poll_handle: int | None = None
    """libfuse's handle of a ``poll`` waiting for this file to turn readable (rule 7)."""
    member: tuple[Group, str] | None = None
    """The notification group and value of a ``notify=id:value`` open (``mount.groups``)."""

    @property
    def stream(self) -> bool:
        """Read like a stream (rule 2)."""
        return self.view.wait or self.view.delta or self.view.deltadir


@dataclass
class Overlay:
    """What this mount did that the relay may not show yet: created or removed paths."""

    made: dict[str, str] = field(default_factory=dict)  # path -> "file" | "dir"
    gone: set[str] = field(default_factory=set)


class ObjectsFS(fuse.Operations):  # type: ignore[misc]  # an untyped base class
    """The FUSE operations of one mounted objects dataset (the module's rules)."""

    use_ns = True

    def __init__(self, net: Link) -> None:
        self.net = net
        self._handles: dict[int, Handle] = {}
        self._ids = itertools.count(1)
        self._dirs: dict[str, tuple[int, ObjectFile]] = {}
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self._notices = Notifications(self._lock, self.stopping)
        self._overlay = Overlay()
        self._started = time.time_ns()

    # -- looking up --------------------------------------------------------------------------

    def getattr(self, path: str, fh: Any = None) -> dict[str, int]:
        """A directory, an object (a file), or ENOENT; EIO while the relay is away."""
        base = _base(path)
        kind = "dir" if base == "/" else self._kind(base)
        if kind is None:
            raise fuse.FuseOSError(errno.ENOENT)
        mode = stat.S_IFDIR | 0o755 if kind == "dir" else stat.S_IFREG | 0o644
        now = self._started
        return {
            "st_mode": mode,
            "st_nlink": 2 if kind == "dir" else 1,
            "st_size": 0,
            "st_uid": os.getuid(),
            "st_gid": os.getgid(),
            "st_atime": now,
            "st_mtime": now,
            "st_ctime": now,
        }

    def readdir(self, path: str, fh: Any) -> list[str]:
        """The objects and directories of ``path``, and ``.all``."""
        store = self._directory(path).store
        with self._lock:
            names = {p for p in store.entries(path) if p not in self._overlay.gone}
            names |= {p for p in self._overlay.made if directory_of(p) == path}
        return [".", "..", ".all", *sorted(name_of(p) for p in names)]

    def _kind(self, path: str) -> str | None:
        if path == NOTIFY:
            return "file"
        if name_of(path) == ".all":
            parent = directory_of(path)
            return "file" if parent == "/" or self._kind(parent) == "dir" else None
        with self._lock:
            if path in self._overlay.gone:
                return None
            made = self._overlay.made.get(path)
        if made is not None:
            return made
        store = self._directory(directory_of(path)).store
        if store.is_directory(path):
            return "dir"
        return "file" if store.is_object(path) else None

    def _directory(self, path: str) -> ObjectFile:
        """The live ``path/.all`` subscription this mount keeps for lookups (EIO if away)."""
        with self._lock:
            held = self._dirs.get(path)
        if held is not None and held[1].error is None and held[0] == self.net.generation:
            return held[1]
        watch = self._call(self._open_ready(ObjectPath(_all(path))))
        with self._lock:
            self._dirs[path] = (self.net.generation, watch)
        return watch

    async def _open_ready(self, view: ObjectPath) -> ObjectFile:
        objects = await self.net.reader()
        try:
            file = await objects.open(_reading(view.path))
            await file.started()
        except SubscriptionError as error:
            raise Unreachable(f"relay {self.net.relay}: {error}") from error
        return file

    # -- reading -----------------------------------------------------------------------------

    def open(self, path: str, fi: Any) -> int:
        """Open an object or ``.all`` for reading (a subscription) or writing (rule 2), or
        ``/.notify`` (a notification group)."""
        writing = (fi.flags & os.O_ACCMODE) != os.O_RDONLY
        if path == NOTIFY:
            with self._lock:
                number = next(self._ids)
            self._notices.open(number, writing)
            fi.direct_io = 1
            fi.fh = number
            return 0
        view = _view(path)
        if writing and name_of(view.object_path) == ".all":
            raise fuse.FuseOSError(errno.EISDIR)
        if view.critical and not writing:
            log.warning("open of %s refused: 'critical' marks a writer; open it for writing", path)
            raise fuse.FuseOSError(errno.EINVAL)
        handle = Handle(view.object_path, view, writing)
        if view.notify is not None:
            handle.member = self._notices.member(path, view.notify, writing)
        fi.direct_io = 1
        fi.fh = self._add(handle)
        if handle.member is not None:  # told from the open on, not from the first read
            self._subscribed(handle)
        return 0

    def read(self, path: str, size: int, offset: int, fi: Any) -> bytes:
        """The next bytes of the file: a snapshot by offset, or the next of a stream (rule 2)."""
        if self._notices.holds(fi.fh):
            return self._notices.read(fi.fh, size)
        handle = self._handle(fi)
        if not handle.stream:
            if handle.snapshot is None:
                handle.snapshot = self._read_file(handle, wait=False).encode()
            return handle.snapshot[offset : offset + size]
        while not handle.pending:
            text = self._read_file(handle, wait=handle.view.wait)
            if not text:
                if not handle.view.wait:
                    return b""
                if _interrupted():  # nothing new, and the reader was signalled: it stops
                    raise fuse.FuseOSError(errno.EINTR)
                continue
            handle.pending = text.encode()
        chunk, handle.pending = handle.pending[:size], handle.pending[size:]
        return chunk

    def _read_file(self, handle: Handle, wait: bool) -> str:
        """One PPS read of the handle's subscription, resubscribing after a reconnection."""
        while not (self.stopping.is_set() or handle.closed):
            file = self._subscribed(handle)
            try:
                return self.net.call(_read(file, wait), timeout=WAIT_SLICE + STEP_TIMEOUT)
            except TimeoutError:
                # a blocked wait: look again whether the reader was signalled or we stop
                if _interrupted():
                    raise fuse.FuseOSError(errno.EINTR) from None
                continue
            except SubscriptionError as error:
                log.warning("read of %s: %s; resubscribing", handle.path, error)
                self._call(self.net.reader())
        raise fuse.FuseOSError(errno.EINTR)

    def _subscribed(self, handle: Handle) -> ObjectFile:
        """The handle's subscription, made (again) if it has none or lost it."""
        if handle.file is None or handle.file.error is not None:
            handle.file = self._call(self._open_ready(handle.view))
            handle.generation = self.net.generation
            handle.file.on_readable = lambda: self._wake(handle)
            if self._call(_readable(handle.file)):  # its first push came before the callback
                self._wake(handle)
        return handle.file

    # -- poll and select (rule 7) --------------------------------------------------------------

    def poll(self, path: str, fi: Any, ph: int | None, reventsp: Any) -> int:
        """Readiness for ``poll``/``select``: a stream is readable when a read would return at
        once; libfuse's ``ph`` is kept and notified when it turns so."""
        if self._notices.holds(fi.fh):
            reventsp[0] = self._notices.poll(fi.fh, ph)
            return 0
        handle = self._handle(fi)
        if ph:
            with self._lock:  # kept before looking, so that a change after the look wakes it
                old, handle.poll_handle = handle.poll_handle, ph
            destroy_poll_handle(old)
        ready = not handle.stream or bool(handle.pending)
        if not ready:
            file = self._subscribed(handle)
            ready = self._call(_readable(file))
        events = select.POLLOUT | select.POLLWRNORM
        reventsp[0] = events | (select.POLLIN | select.POLLRDNORM if ready else 0)
        return 0

    def _wake(self, handle: Handle) -> None:
        """The handle's file turned readable (on the link's loop): wake its ``poll``, and tell
        its notification group."""
        with self._lock:
            ph, handle.poll_handle = handle.poll_handle, None
        notify_poll(ph)
        if handle.member is not None and not handle.closed:
            group, value = handle.member
            self._notices.tell(group, lambda: group.tell(value))

    # -- writing -----------------------------------------------------------------------------

    def create(self, path: str, mode: int, fi: Any) -> int:
        """Create an empty object (``obj?nopersist``: non-persistent), then open it (rule 4)."""
        view = _view(path)
        self._write(
            view.object_path,
            lambda objects: objects.write(view.object_path, [], persist=not view.nopersist),
        )
        self._made(view.object_path, "file")
        handle = Handle(view.object_path, view, writing=True)
        fi.direct_io = 1
        fi.fh = self._add(handle)
        return 0

    def write(self, path: str, data: bytes, offset: int, fi: Any) -> int:
        """Apply whole lines of PPS text to the object, durably (rule 3)."""
        handle = self._handle(fi)
        try:
            lines = parse_write(data.decode("utf-8"))
        except (UnicodeDecodeError, InvalidWrite) as error:
            log.warning("write to %s refused: %s", handle.path, error)
            raise fuse.FuseOSError(errno.EINVAL) from error
        persist = not handle.view.nopersist
        self._write(handle.path, lambda objects: objects.write(handle.path, lines, persist=persist))
        return len(data)

    def truncate(self, path: str, length: int, fh: Any = None) -> int:
        """Nothing to truncate: an object is its attributes (rule 3)."""
        return 0

    def utimens(self, path: str, times: Any = None, fh: Any = None) -> int:
        """Nothing to set: objects have no times of their own (``touch`` works)."""
        return 0

    def unlink(self, path: str) -> None:
        """Delete an object (rule 4)."""
        base = _base(path)
        self._write(base, lambda objects: objects.delete(base))
        self._removed(base)

    def mkdir(self, path: str, mode: int) -> None:
        """Make a directory (rule 4)."""
        base = _base(path)
        self._write(base, lambda objects: objects.make_directory(base))
        self._made(base, "dir")

    def rmdir(self, path: str) -> None:
        """Remove an empty directory (rule 4)."""
        base = _base(path)
        try:
            self._write(base, lambda objects: objects.remove_directory(base))
        except fuse.FuseOSError as error:
            if error.errno == errno.EINVAL and self._directory(base).store.entries(base):
                raise fuse.FuseOSError(errno.ENOTEMPTY) from error
            raise
        self._removed(base)

    def _write(self, path: str, request: Any) -> None:
        async def step() -> None:
            objects = await self.net.writer()
            await request(objects)

        try:
            self._call(step())
        except (InvalidWrite, InvalidView) as error:
            log.warning("write to %s refused: %s", path, error)
            raise fuse.FuseOSError(errno.EINVAL) from error
        except SubscriptionError as error:
            if error.code in ("bad_request", "invalid_view"):
                log.warning("write to %s refused by the publisher: %s", path, error)
                raise fuse.FuseOSError(errno.EINVAL) from error
            log.error("write to %s failed: %s", path, error)
            raise fuse.FuseOSError(errno.EIO) from error

    # -- handles -----------------------------------------------------------------------------

    def release(self, path: str, fi: Any) -> int:
        """Close a handle; its subscription ends. A ``critical`` writer's close deletes the
        object's non-persistent attributes (rule 8)."""
        if self._notices.release(fi.fh):
            return 0
        with self._lock:
            handle = self._handles.pop(fi.fh, None)
        if handle is None:
            return 0
        handle.closed = True
        destroy_poll_handle(handle.poll_handle)
        if handle.member is not None:
            member, value = handle.member
            self._notices.tell(member, lambda: member.closed(value))
        if handle.file is not None:
            asyncio.run_coroutine_threadsafe(handle.file.close(), self.net.loop)
        if handle.writing and handle.view.critical:
            # a failure is logged by _write; close(2) has returned already
            with contextlib.suppress(fuse.FuseOSError):
                self._write(handle.path, lambda objects: objects.purge(handle.path))
        return 0

    def destroy(self, path: str) -> None:
        """The file system is unmounted: blocked reads end."""
        self.stopping.set()

    def _add(self, handle: Handle) -> int:
        with self._lock:
            number = next(self._ids)
            self._handles[number] = handle
        return number

    def _handle(self, fi: Any) -> Handle:
        with self._lock:
            handle = self._handles.get(fi.fh)
        if handle is None:
            raise fuse.FuseOSError(errno.EBADF)
        return handle

    def _made(self, path: str, kind: str) -> None:
        with self._lock:
            self._overlay.made[path] = kind
            self._overlay.gone.discard(path)

    def _removed(self, path: str) -> None:
        with self._lock:
            self._overlay.made.pop(path, None)
            self._overlay.gone.add(path)

    def _call(self, step: Coroutine[Any, Any, T]) -> T:
        """Run a network step; EIO when the relay or publisher is away or too slow (rule 5)."""
        try:
            return self.net.call(step)
        except (Unreachable, TimeoutError, OSError) as error:
            log.error("%s", error or type(error).__name__)
            raise fuse.FuseOSError(errno.EIO) from error


async def _read(file: ObjectFile, wait: bool) -> str:
    """One read; a blocked one gives up after ``WAIT_SLICE`` (raising TimeoutError)."""
    if not wait:
        return await file.read(wait=False)
    return await asyncio.wait_for(file.read(wait=True), WAIT_SLICE)


async def _readable(file: ObjectFile) -> bool:
    return file.readable  # looked at on the loop that changes it


def _reading(path: str) -> str:
    """The path a handle subscribes with: without ``critical`` (its writes') and ``notify=``
    (the mount's)."""
    base, mark, options = path.partition("?")
    local = ("critical", "notify")
    kept = [o for o in options.split(",") if o.partition("=")[0] not in local] if mark else []
    return base + ("?" + ",".join(kept) if kept else "")


def _interrupted() -> bool:
    """Whether the caller of this thread's FUSE request was signalled (libfuse, ``intr``)."""
    # mfusepy binds libfuse but not fuse_interrupted; its library handle is the one loaded.
    return bool(fuse._libfuse.fuse_interrupted())


def _base(path: str) -> str:
    return path.partition("?")[0] or "/"


def _all(directory: str) -> str:
    return directory.rstrip("/") + "/.all"


def _view(path: str) -> ObjectPath:
    """The path with its open options as a view (EINVAL with a logged reason if malformed)."""
    try:
        return ObjectPath(path)
    except InvalidView as error:
        log.warning("open of %s refused: %s", path, error)
        raise fuse.FuseOSError(errno.EINVAL) from error
