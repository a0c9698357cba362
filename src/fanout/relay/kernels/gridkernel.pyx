# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""Building a buffer's grid index (``spatial.GridIndex``) in compiled code, without the GIL.

The relay's writer thread builds the inert buffer's grid for every batch while the event loop
serves pushes. In numpy that is dozens of calls; the thread needs the GIL back after each, and
with the loop busy it waits for it every time (``RelayConfig.switch_interval``), so the build
took twice its CPU time in wall time and cost the loop a few milliseconds of switching. Here
it is three calls, each one pass without the GIL:

1. ``finite_bounds``: which rows are finite on every axis, and the bounds of those;
2. ``bin_rows``: each row's cell (``GridIndex._axis_cells``' arithmetic exactly) and a stable
   counting sort of the rows by cell: the grid's ``order`` and ``offsets``;
3. ``gather``: every column the grid keeps in cell order (``binned``, ``carried``), taken at
   ``order`` in one pass.

The answers are the numpy path's exactly: ``tests/relay/kernels/test_gridkernel.py`` checks it.
"""

from libc.math cimport floor, isfinite, isnan
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

import numpy as np

#: Index axes at most (``GridIndex`` is built over 2 or 3; 1 works too).
DEF MAX_DIMS = 3


cdef int _axes(list columns, Py_ssize_t rows, const double** at) except -1:
    """Point ``at`` at each column's values (float64, C-contiguous, ``rows`` long)."""
    cdef const double[::1] column
    if len(columns) > MAX_DIMS:
        raise ValueError(f"{len(columns)} axes: at most {MAX_DIMS}")
    for axis in range(len(columns)):
        column = columns[axis]
        if column.shape[0] != rows:
            raise ValueError(f"axis {axis} has {column.shape[0]} rows, not {rows}")
        at[axis] = &column[0] if rows else NULL
    return 0


def finite_bounds(list columns):
    """Which rows are finite on every axis, how many, and each axis' bounds over them.

    Args:
        columns: float64 arrays, one per axis (at most 3), equally long, C-contiguous.

    Returns:
        ``(finite, count, lo, hi)``: a bool array, the number of finite rows, and per axis the
        least and greatest finite value (0.0 when no row is finite).
    """
    cdef Py_ssize_t dims = len(columns), rows = len(columns[0]) if dims else 0
    cdef Py_ssize_t axis, row, count = 0
    cdef const double* at[MAX_DIMS]
    _axes(columns, rows, at)
    finite_array = np.empty(rows, dtype=np.uint8)
    cdef unsigned char[::1] finite = finite_array
    cdef double low[MAX_DIMS]
    cdef double high[MAX_DIMS]
    cdef double value
    cdef bint ok
    for axis in range(dims):
        low[axis] = 0.0
        high[axis] = 0.0
    with nogil:
        for row in range(rows):
            ok = True
            for axis in range(dims):
                if not isfinite(at[axis][row]):
                    ok = False
            finite[row] = ok
            if not ok:
                continue
            for axis in range(dims):
                value = at[axis][row]
                if count == 0 or value < low[axis]:
                    low[axis] = value
                if count == 0 or value > high[axis]:
                    high[axis] = value
            count += 1
    return (
        finite_array.view(np.bool_),
        count,
        [low[axis] for axis in range(dims)],
        [high[axis] for axis in range(dims)],
    )


def bin_rows(
    list columns,
    const unsigned char[::1] finite,
    const double[::1] origin,
    const double[::1] side,
    long long cells,
):
    """Sort the rows by grid cell, stably: the grid's ``order`` and ``offsets``.

    A row's cell on an axis is ``floor((value - origin) / side)`` with NaN as 0, clipped to
    ``[0, cells - 1]`` (``GridIndex._axis_cells``); its cell is the axes' cells in row-major
    order; rows not ``finite`` go after every cell.

    Returns:
        ``(order, offsets)``: positions in cell order (intp), and where each cell's rows start
        in it (int64, ``cells ** dims + 2`` of them: the last cell holds the non-finite rows).
    """
    cdef Py_ssize_t dims = len(columns), rows = len(finite), axis, row, at
    cdef Py_ssize_t total = cells ** dims
    cdef const double* axes[MAX_DIMS]
    _axes(columns, rows, axes)
    if origin.shape[0] != dims or side.shape[0] != dims:
        raise ValueError(f"origin and side need {dims} values")
    cell_array = np.zeros(rows, dtype=np.int64)
    offsets_array = np.zeros(total + 2, dtype=np.int64)
    order_array = np.empty(rows, dtype=np.intp)
    cdef long long[::1] cell = cell_array
    cdef long long[::1] offsets = offsets_array
    cdef Py_ssize_t[::1] order = order_array
    cdef double raw, top = <double>(cells - 1)
    with nogil:
        for row in range(rows):
            if not finite[row]:
                cell[row] = total  # past every real cell: never in a slice
            else:
                for axis in range(dims):
                    raw = floor((axes[axis][row] - origin[axis]) / side[axis])
                    if isnan(raw) or raw < 0.0:
                        raw = 0.0
                    elif raw > top:
                        raw = top
                    cell[row] = cell[row] * cells + <long long>raw
            offsets[cell[row] + 1] += 1
        for at in range(total + 1):
            offsets[at + 1] += offsets[at]
        # ``offsets[c]`` is where cell c starts: fill each cell's slice in row order (stable),
        # using ``offsets[c]`` as the cursor, which ends where cell c + 1 starts; then shift.
        for row in range(rows):
            at = cell[row]
            order[offsets[at]] = row
            offsets[at] += 1
        for at in range(total, 0, -1):
            offsets[at] = offsets[at - 1]
        offsets[0] = 0
    return order_array, offsets_array


def gather(list arrays, const Py_ssize_t[::1] order):
    """``[array.take(order) for array in arrays]`` in one pass without the GIL.

    Args:
        arrays: 1-D C-contiguous arrays of fixed-size items (not object arrays), each longer
            than the largest position in ``order``.
        order: positions.

    Raises:
        ValueError: an object array, a non-contiguous array, or a position out of range.
    """
    cdef Py_ssize_t count = len(arrays), rows = order.shape[0], i, row, size
    cdef Py_ssize_t least = 0, most = -1
    with nogil:
        for row in range(rows):
            if order[row] < least:
                least = order[row]
            if order[row] > most:
                most = order[row]
    if least < 0:
        raise ValueError(f"position {least} out of range")
    results = []
    for i in range(count):
        array = arrays[i]
        if array.dtype.hasobject or array.ndim != 1 or not array.flags.c_contiguous:
            raise ValueError(f"array {i} ({array.dtype}) is not a contiguous array of fixed items")
        if most >= len(array):
            raise ValueError(f"position {most} out of range for {len(array)} rows")
        results.append(np.empty(rows, dtype=array.dtype))
    if not rows or not count:
        return results
    cdef const char** sources = <const char**>malloc(count * sizeof(char*))
    cdef char** targets = <char**>malloc(count * sizeof(char*))
    cdef Py_ssize_t* sizes = <Py_ssize_t*>malloc(count * sizeof(Py_ssize_t))
    cdef const unsigned char[::1] source
    cdef unsigned char[::1] target
    try:
        if sources == NULL or targets == NULL or sizes == NULL:
            raise MemoryError()
        for i in range(count):
            source = arrays[i].view(np.uint8)  # keeps no reference: ``arrays`` does
            target = results[i].view(np.uint8)
            sources[i] = <const char*>&source[0]
            targets[i] = <char*>&target[0]
            sizes[i] = arrays[i].dtype.itemsize
        with nogil:
            for i in range(count):
                _take(sources[i], targets[i], sizes[i], order)
    finally:
        free(sources)
        free(targets)
        free(sizes)
    return results


cdef void _take(
    const char* source, char* target, Py_ssize_t size, const Py_ssize_t[::1] order
) noexcept nogil:
    cdef Py_ssize_t row, rows = order.shape[0]
    if size == 8:
        for row in range(rows):
            (<long long*>target)[row] = (<const long long*>source)[order[row]]
    elif size == 4:
        for row in range(rows):
            (<int*>target)[row] = (<const int*>source)[order[row]]
    else:
        for row in range(rows):
            memcpy(target + row * size, source + order[row] * size, size)
