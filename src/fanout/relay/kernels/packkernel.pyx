# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""Rows packed into their wire bytes in compiled code: ``pushes.encode_range`` for every run of
a turn at once, with the gather of the rows from their columns in the same pass.

A turn of box views (``batchcut.cut_boxes``) has, per section of its pushes (entered, updated,
left), one array of row positions and the bounds of each push's run in it. Encoding a run in
Python builds a ``Column`` per column and a ``Columns`` around them, then msgpack; a few
microseconds a run, three runs a push. Here every run of a section is written straight into
its bytes: the ``Columns`` map (``length``, ``columns``), then per column its ``[name, dtype,
data]`` array, the data being the run's values gathered from the column (native byte order:
only for dtypes whose native bytes are their wire form, ``pushes._WIRE_DTYPES``).

The bytes are msgspec's for the same ``Columns`` exactly (the smallest integer and ``bin``
headers); ``tests/relay/kernels/test_packkernel.py`` compares them.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

import numpy as np

#: ``Columns`` is a map of two fields, ``length`` then ``columns`` (msgpack fixmap, fixstrs).
cdef bytes LENGTH = b"\x82\xa6length"
cdef bytes COLUMNS = b"\xa7columns"


def pack_runs(
    list prefixes,
    list columns,
    object positions,
    const long long[::1] bounds,
    object empty,
    object wrap,
):
    """The encoded ``Columns`` of each run of rows.

    Args:
        prefixes: per column, the msgpack of its ``Column`` up to its data: the array header,
            name and dtype (``Column(name, dtype, b"")`` without its empty ``bin``).
        columns: per column, its values: a 1-D contiguous array.
        positions: the rows, as positions in the columns (an intp array); None: the columns'
            own order (run ``i`` is rows ``bounds[i]:bounds[i + 1]``).
        bounds: run ``i`` is ``positions[bounds[i]:bounds[i + 1]]``.
        empty: what an empty run is, as it is (not packed).
        wrap: called with each run's bytes (``msgspec.Raw``).

    Returns:
        One item per run: ``wrap(bytes)``, or ``empty``.
    """
    cdef Py_ssize_t count = bounds.shape[0] - 1, width = len(columns), c, run, k, n, size
    cdef Py_ssize_t shortest = -1
    if count < 0:
        raise ValueError("no bounds")
    if len(prefixes) != width:
        raise ValueError(f"{len(prefixes)} prefixes for {width} columns")
    if width >= 1 << 16:
        raise ValueError(f"{width} columns: at most 65,535")
    for run in range(count):
        if bounds[run] < 0 or bounds[run + 1] < bounds[run]:
            raise ValueError(f"bounds {bounds[run]}, {bounds[run + 1]}: not a run")
    cdef const Py_ssize_t[::1] rows
    cdef const Py_ssize_t* at = NULL
    if positions is not None:
        rows = positions
        if rows.shape[0] < bounds[count]:
            raise ValueError("the bounds run past the positions")
        at = &rows[0] if rows.shape[0] else NULL
    held = []  # keeps each column's buffer alive while we read it
    cdef const uint8_t[::1] raw
    cdef const uint8_t** data = <const uint8_t**>PyMem_Malloc(max(width, 1) * sizeof(void*))
    cdef Py_ssize_t* itemsize = <Py_ssize_t*>PyMem_Malloc(max(width, 1) * sizeof(Py_ssize_t))
    cdef Py_ssize_t* length = <Py_ssize_t*>PyMem_Malloc(max(width, 1) * sizeof(Py_ssize_t))
    if data == NULL or itemsize == NULL or length == NULL:
        PyMem_Free(data)
        PyMem_Free(itemsize)
        PyMem_Free(length)
        raise MemoryError()
    out = []
    cdef bytes packed
    cdef char* to
    cdef Py_ssize_t fixed = len(LENGTH) + len(COLUMNS) + _array_size(width)
    try:
        for c in range(width):
            values = columns[c]
            if values.ndim != 1 or not values.flags.c_contiguous:
                raise ValueError(f"column {c}: not a 1-D contiguous array")
            if not isinstance(prefixes[c], bytes):
                raise TypeError(f"prefix {c}: not bytes")
            raw = values.view(np.uint8)
            held.append(raw)
            data[c] = &raw[0] if raw.shape[0] else NULL
            itemsize[c] = values.itemsize
            length[c] = values.shape[0]
            fixed += len(prefixes[c])
            if shortest < 0 or length[c] < shortest:
                shortest = length[c]
        if positions is None and width and shortest < bounds[count]:
            raise ValueError(f"the bounds run past a column's {shortest} rows")
        if at != NULL and width:
            for k in range(bounds[0], bounds[count]):
                if at[k] < 0 or at[k] >= shortest:
                    raise IndexError(f"position {at[k]} is past a column's {shortest} rows")
        for run in range(count):
            n = bounds[run + 1] - bounds[run]
            if n <= 0:
                out.append(empty)
                continue
            size = fixed + _uint_size(n)
            for c in range(width):
                if n * itemsize[c] >= 4294967296:
                    raise ValueError(f"a run of {n} rows: column {c} is over msgpack's 4 GiB")
                size += _bin_size(n * itemsize[c]) + n * itemsize[c]
            packed = PyBytes_FromStringAndSize(NULL, size)
            to = PyBytes_AS_STRING(packed)
            to = _put(to, LENGTH)
            to = _uint(to, <uint64_t>n)
            to = _put(to, COLUMNS)
            to = _array(to, width)
            for c in range(width):
                to = _put(to, prefixes[c])
                to = _bin(to, n * itemsize[c])
                to = _gather(to, data[c], itemsize[c], at, bounds[run], n)
            if to - PyBytes_AS_STRING(packed) != size:
                raise AssertionError("packed size mismatch")
            out.append(wrap(packed))
    finally:
        PyMem_Free(data)
        PyMem_Free(itemsize)
        PyMem_Free(length)
    return out


cdef inline char* _put(char* to, bytes piece):
    cdef Py_ssize_t n = len(piece)
    memcpy(to, PyBytes_AS_STRING(piece), n)
    return to + n


cdef inline char* _gather(
    char* to, const uint8_t* data, Py_ssize_t itemsize, const Py_ssize_t* at, Py_ssize_t first,
    Py_ssize_t n,
) noexcept:
    """The values of rows ``first:first + n`` (of ``at``, or of the column itself) into ``to``."""
    cdef Py_ssize_t k, bytes_ = n * itemsize
    if at == NULL:
        memcpy(to, data + first * itemsize, bytes_)
        return to + bytes_
    at += first
    if itemsize == 8:
        for k in range(n):
            (<uint64_t*>to)[k] = (<const uint64_t*>data)[at[k]]
    elif itemsize == 4:
        for k in range(n):
            (<uint32_t*>to)[k] = (<const uint32_t*>data)[at[k]]
    elif itemsize == 2:
        for k in range(n):
            (<uint16_t*>to)[k] = (<const uint16_t*>data)[at[k]]
    else:
        for k in range(n):
            memcpy(to + k * itemsize, data + at[k] * itemsize, itemsize)
    return to + bytes_


cdef inline Py_ssize_t _sized_size(uint64_t n) noexcept:
    """The bytes ``_sized`` writes for ``n``."""
    return 2 if n < 256 else 3 if n < 65536 else 5 if n < 4294967296 else 9


cdef inline char* _sized(char* to, int marker, uint64_t n) noexcept:
    """``n`` in the smallest of msgpack's 1-, 2-, 4- or 8-byte big-endian forms, after
    ``marker`` or the next three markers (uint 8 to 64 from 0xcc, bin 8 to 32 from 0xc4)."""
    if n < 256:
        to[0] = <char>marker
        to[1] = <char>n
        return to + 2
    if n < 65536:
        to[0] = <char>(marker + 1)
        return _big_endian(to + 1, n, 2)
    if n < 4294967296:
        to[0] = <char>(marker + 2)
        return _big_endian(to + 1, n, 4)
    to[0] = <char>(marker + 3)
    return _big_endian(to + 1, n, 8)


cdef inline Py_ssize_t _uint_size(uint64_t n) noexcept:
    return 1 if n < 128 else _sized_size(n)


cdef inline char* _uint(char* to, uint64_t n) noexcept:
    """A non-negative msgpack integer, in its smallest form (as msgspec writes it)."""
    if n < 128:
        to[0] = <char>n  # positive fixint
        return to + 1
    return _sized(to, 0xcc, n)


cdef inline Py_ssize_t _bin_size(Py_ssize_t n) noexcept:
    return _sized_size(<uint64_t>n)


cdef inline char* _bin(char* to, Py_ssize_t n) noexcept:
    """A msgpack ``bin`` header for ``n`` bytes (bin 8, 16 or 32; ``pack_runs`` refuses more)."""
    return _sized(to, 0xc4, <uint64_t>n)


cdef inline Py_ssize_t _array_size(Py_ssize_t n) noexcept:
    return 1 if n < 16 else 3


cdef inline char* _array(char* to, Py_ssize_t n) noexcept:
    """A msgpack array header for ``n`` items (fixarray or array 16)."""
    if n < 16:
        to[0] = <char>(0x90 | n)
        return to + 1
    to[0] = <char>0xdc
    return _big_endian(to + 1, <uint64_t>n, 2)


cdef inline char* _big_endian(char* to, uint64_t n, int width) noexcept:
    cdef int i
    for i in range(width):
        to[i] = <char>((n >> (8 * (width - 1 - i))) & 0xff)
    return to + width
