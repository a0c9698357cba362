"""A relay's leader's state in shared memory, written once per swap and read by every worker
(``relay.shell.workers``; docs/architecture.md, "Workers").

The leader keeps, per dataset, a few files in a directory of its own (on ``/dev/shm`` where
there is one), each mapped in memory and holding one generation of the dataset's active table
and its grid (``relay.data.layout``). After a swap it writes the new state into a file no
worker may still read (``tiers.shared``) and tells the workers its name and generation in a
``Batch`` without rows (``Batch.shared``); a worker maps the file read-only and swaps in its
arrays as they are: no rows encoded, sent, decoded, written or indexed again per worker.
Only tables of fixed-width columns (integer keys) with a space index are shared; the rest
travel as rows. Space is reserved before it is written (a full ``/dev/shm`` is an error,
``failure``, never a crash); a directory left by a leader that was killed is removed by the
next leader on the machine.
"""

from __future__ import annotations

import logging
import mmap
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from fanout.relay.data import layout
from fanout.relay.data.buffers import DoubleBuffer, Stamp, Table
from fanout.relay.data.spatial import GridIndex
from fanout.tiers.shared import Holdings
from fanout.wire.messages import Batch, SharedRef

log = logging.getLogger(__name__)

#: Files per dataset at most (the leader gives its own: enough for every worker lagging at
#: once): a state that finds them all in use is not shared (the workers keep the last one
#: until a file is free). Files are made as they are needed.
MOST_FILES = 8
#: Where the directory goes when the machine has it (memory, not disk).
SHM = Path("/dev/shm")
#: The directory's name: this, the leader's process id, a dash and a random part.
PREFIX = "fanout-relay-"


@dataclass
class _File:
    path: Path
    memory: mmap.mmap
    generation: int = layout.WRITING


@dataclass
class _Dataset:
    number: int
    files: list[_File] = field(default_factory=list)
    latest: SharedRef | None = None
    swap: tuple[DoubleBuffer, int] | None = None  # the buffer and swap ``latest`` holds


class SharedStore:
    """The leader's side: each dataset's active state written to shared memory once a swap.

    Attributes:
        directory: where the files are (the workers are given it).
        holdings: what each worker may still read.
        written: states written (a figure for ``/metrics``).
        failure: why the last state could not be written (no space), or None.
    """

    def __init__(self, directory: Path | None = None, most: int = MOST_FILES) -> None:
        if directory is None:
            base = SHM if SHM.is_dir() and os.access(SHM, os.W_OK) else Path(tempfile.gettempdir())
            sweep(base)
            directory = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base))
        self.directory = directory
        self.most = most
        self.failure: OSError | None = None
        self.holdings = Holdings()
        self.written = 0
        self._datasets: dict[str, _Dataset] = {}
        self._generations = 0

    def publish(self, dataset: str, buffer: DoubleBuffer) -> SharedRef | None:
        """Where the active state of ``buffer`` (``dataset``'s) lies in shared memory: written
        now if it was swapped in since the last call; None when it is not shareable (no space
        index, or columns of no fixed width) or every file is in use."""
        if not buffer.coordinates or buffer.stamp is None or not layout.shareable(buffer.active):
            return None
        held = self._datasets.setdefault(dataset, _Dataset(len(self._datasets)))
        swap = held.swap
        if swap is not None and swap[0] is buffer and swap[1] == buffer.generation:
            return held.latest
        laid = layout.lay_out(buffer.active, buffer.index, buffer.stamp)
        try:
            target = self._free(dataset, held, laid.size)
        except OSError as exc:  # no room on /dev/shm (or its like): said, not raised
            if self.failure is None:
                where = self.directory
                log.error("shared state of %s not written in %s: %s", dataset, where, exc)
            self.failure = exc
            return None
        if target is None:
            log.warning("shared state of %s: every file is in use; the workers wait", dataset)
            return None
        self._generations += 1
        with memoryview(target.memory) as view:
            layout.write(view, laid, self._generations)
        target.generation = self._generations
        held.latest = SharedRef(target.path.name, target.generation)
        held.swap = (buffer, buffer.generation)
        self.written += 1
        return held.latest

    def _free(self, dataset: str, held: _Dataset, size: int) -> _File | None:
        """A file no worker may read, at least ``size`` bytes long (grown or made if need be)."""
        latest = held.latest.generation if held.latest is not None else None
        for file in held.files:
            if file.generation != latest and not self.holdings.in_use(dataset, file.generation):
                break
        else:
            if len(held.files) >= self.most:
                return None
            path = self.directory / f"{held.number}-{len(held.files)}"
            file = _File(path, _mapped(path, size, writable=True))
            held.files.append(file)
        if len(file.memory) < size:
            file.memory.close()
            file.memory = _mapped(file.path, size + size // 4, writable=True)
        file.generation = layout.WRITING
        return file

    def close(self) -> None:
        """Remove the files (the workers' mappings stay valid until they end)."""
        for held in self._datasets.values():
            for file in held.files:
                file.memory.close()
        _remove(self.directory)


class SharedReader:
    """A worker's side: the state a batch names, mapped read-only from the leader's files."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._mapped: dict[str, mmap.mmap] = {}

    def __call__(self, batch: Batch, like: Table) -> tuple[Table, GridIndex, Stamp]:
        """``intake.SharedReader``: the table, grid and stamp of ``batch.shared``.

        Raises:
            ValueError: a bad file name, or the file does not hold that generation.
            OSError: the file cannot be opened.
        """
        ref = batch.shared
        assert ref is not None
        if not ref.name or "/" in ref.name or ref.name.startswith("."):
            raise ValueError(f"{ref.name!r} is not the name of a shared state")
        path = self.directory / ref.name
        memory = self._mapped.get(ref.name)
        if memory is None or len(memory) != path.stat().st_size:  # new, or grown
            memory = self._mapped[ref.name] = _mapped(path)
        found = layout.generation_of(memory)
        if found != ref.generation:
            raise ValueError(f"{ref.name} holds generation {found}, not {ref.generation}")
        return layout.read(memoryview(memory), like)


def _mapped(path: Path, size: int = 0, writable: bool = False) -> mmap.mmap:
    """``path`` in memory: read-only, or made at least ``size`` bytes long and writable."""
    flags = os.O_RDWR | os.O_CREAT if writable else os.O_RDONLY
    descriptor = os.open(path, flags, 0o600)
    try:
        if writable and os.fstat(descriptor).st_size < size:
            os.posix_fallocate(descriptor, 0, size)  # ENOSPC now, not SIGBUS when written
        length = os.fstat(descriptor).st_size
        protection = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        return mmap.mmap(descriptor, length, mmap.MAP_SHARED, protection)
    finally:
        os.close(descriptor)


def sweep(base: Path) -> None:
    """Remove the directories in ``base`` of leaders that no longer run (killed: they could
    not remove their own); where processes cannot be looked up in ``/proc``, none."""
    if not Path("/proc/self").exists():
        return
    for directory in base.glob(f"{PREFIX}*-*"):
        pid = directory.name[len(PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _remove(directory)


def _remove(directory: Path) -> None:
    """Remove ``directory`` and its files; what cannot be removed is logged, not raised (the
    relay stops, or starts, all the same)."""
    try:
        shutil.rmtree(directory)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("shared state's directory %s not removed: %s", directory, exc)
