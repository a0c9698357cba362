"""One dataset's state laid out in one piece of memory: how a relay's leader hands its active
table and that table's grid to its workers (``relay.shell.sharedstate``) without encoding rows.

The layout: 16 bytes (the generation, then the header's length, little-endian int64), the
header (msgpack: the stamp, each array's name, dtype, offset and length, and the grid's other
figures), then every array at an offset aligned to 64 bytes. The writer writes the generation
last and ``-1`` first, so that a reader that finds its generation finds the whole state.
Arrays read back are views of the memory, not copies: read-only when the memory is.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from fanout.relay.data.buffers import Stamp, Table
from fanout.relay.data.spatial import GridIndex

#: Bytes before the header: the generation and the header's length.
PREFIX = struct.Struct("<qq")
#: Every array starts at a multiple of this (a cache line).
ALIGN = 64
#: The generation a piece of memory holds while it is being written.
WRITING = -1

_TABLE, _GRID, _CHANGED = "table:", "grid:", "changed"


class Header(msgspec.Struct, frozen=True, array_like=True):
    """What the memory holds besides the arrays."""

    stamp: tuple[int, int, int, float]
    arrays: list[tuple[str, str, int, int]]  # name, dtype, offset, length
    grid: dict[str, Any]


@dataclass(frozen=True)
class Laid:
    """A state ready to be written: its header's bytes, its arrays and their offsets."""

    header: bytes
    arrays: list[tuple[int, npt.NDArray[Any]]]
    size: int


def lay_out(table: Table, grid: GridIndex, stamp: Stamp) -> Laid:
    """Where each of ``table``'s and ``grid``'s arrays goes, and how big the memory must be.

    Raises:
        ValueError: an array is not of a fixed width (strings, decimals: not shareable).
    """
    named = {_TABLE + name: values for name, values in table.columns.items()}
    named[_CHANGED] = table.changed
    grid_arrays, figures = grid.parts()
    named.update({_GRID + name: values for name, values in grid_arrays.items()})
    sized: list[tuple[str, npt.NDArray[Any]]] = []
    for name, values in named.items():
        if values.dtype.hasobject:
            raise ValueError(f"{name} holds objects: only fixed-width columns are shared")
        sized.append((name, np.ascontiguousarray(values)))
    entries: list[tuple[str, str, int, int]] = []
    offset = 0
    for name, values in sized:
        entries.append((name, values.dtype.str, offset, len(values)))
        offset = _aligned(offset + values.nbytes)
    stamped = (stamp.epoch, stamp.seq, stamp.tick, stamp.tick_time)
    header = msgspec.msgpack.encode(Header(stamped, entries, figures))
    start = _aligned(PREFIX.size + len(header))
    placed = [(start + entry[2], values) for entry, (_, values) in zip(entries, sized, strict=True)]
    return Laid(header, placed, start + offset)


def write(memory: memoryview, laid: Laid, generation: int) -> None:
    """Write ``laid`` into ``memory`` (at least ``laid.size`` bytes) as ``generation``."""
    PREFIX.pack_into(memory, 0, WRITING, len(laid.header))
    memory[PREFIX.size : PREFIX.size + len(laid.header)] = laid.header
    for offset, values in laid.arrays:
        target = np.frombuffer(memory, dtype=values.dtype, count=len(values), offset=offset)
        target[...] = values
    PREFIX.pack_into(memory, 0, generation, len(laid.header))


def generation_of(memory: memoryview | bytes | mmap.mmap) -> int:
    """The generation ``memory`` holds (``WRITING`` while it is written)."""
    return int(PREFIX.unpack_from(memory, 0)[0])


def read(memory: memoryview, like: Table) -> tuple[Table, GridIndex, Stamp]:
    """The table, grid and stamp ``memory`` holds, as views of it; ``like`` says the columns
    and dtypes the table must have (the reader's own catalog).

    Raises:
        ValueError: the memory holds other columns or dtypes, or runs past its end.
    """
    _, length = PREFIX.unpack_from(memory, 0)
    start = PREFIX.size
    header = msgspec.msgpack.decode(memory[start : start + length], type=Header)
    base = _aligned(start + length)
    arrays: dict[str, npt.NDArray[Any]] = {}
    for name, dtype, offset, count in header.arrays:
        kind = np.dtype(dtype)
        if base + offset + count * kind.itemsize > len(memory):
            raise ValueError(f"{name} runs past the end of the shared memory")
        arrays[name] = np.frombuffer(memory, dtype=kind, count=count, offset=base + offset)
    columns = {n[len(_TABLE) :]: a for n, a in arrays.items() if n.startswith(_TABLE)}
    changed = arrays[_CHANGED]
    expected = {name: dtype.str for name, dtype in like.dtypes.items()}
    if {name: values.dtype.str for name, values in columns.items()} != expected:
        raise ValueError(f"shared columns {sorted(columns)} are not the dataset's {expected}")
    table = Table.restore(like, columns, changed)
    grid_arrays = {n[len(_GRID) :]: a for n, a in arrays.items() if n.startswith(_GRID)}
    grid = GridIndex.restore(grid_arrays, header.grid)
    return table, grid, Stamp(*header.stamp)


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def shareable(table: Table) -> bool:
    """Whether a table can be laid out (integer keys and fixed-width columns only)."""
    return not any(dtype.hasobject for dtype in table.dtypes.values())
