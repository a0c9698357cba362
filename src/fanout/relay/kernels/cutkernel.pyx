# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""A turn of box views cut in compiled code: the loop that ``batchcut.cut_boxes`` otherwise runs
as a dozen numpy passes (the grid lookup, the comparison with what each subscriber holds, the
"updated since" test).

Two loops, each without the GIL (the writer thread runs meanwhile), with numpy's sort between:

1. for each box, find the grid cells under it (``GridIndex.spans``' arithmetic), walk them and
   keep the candidates inside the box, coded ``(box, position in the table, position in the grid)``
   in the bits of one int64;
2. sort the codes (numpy's vectorised sort: sorting a hundred random positions a box in a loop
   here cost twice the rest of the kernel, in mispredicted branches), so each box's rows are in
   table order, that is in key order (the table is sorted by key);
3. merge each box's keys with its subscriber's held keys (sorted too).

Every read after the first pass is of the grid's copy of the table in cell order
(``GridIndex.carried``): a box's rows lie in a few runs of memory there, where in the table they
are scattered, one cache miss a row and column (in the relay, between the writer thread's writes
and the sockets' buffers, little of the 100,000-row table stays in cache).

Integer keys only (``batchcut`` takes the numpy path for string keys); 2 or 3 index axes. The
answers are the numpy path's exactly: ``tests/relay/kernels/test_cutkernel.py`` checks it.
"""

from libc.math cimport fabs, floor

import numpy as np

#: ``spatial._SLACK``: the relative widening of a box's bounds before finding its cells.
cdef double SLACK = 1e-9


def cut_turn(
    const double[:, ::1] lo,
    const double[:, ::1] hi,
    const double[::1] origin,
    const double[::1] top,
    const double[::1] side,
    long long cells,
    const long long[::1] offsets,
    const Py_ssize_t[::1] order,
    list binned,
    const long long[::1] keys,
    const long long[::1] changed,
    const long long[::1] held,
    const long long[::1] held_at,
    const long long[::1] since,
):
    """Each box's rows, and how they differ from what its subscriber holds, as positions in
    the grid's cell order.

    Args:
        lo, hi: the boxes' corners, one row per box.
        origin, top, side, cells, offsets, order, binned: the grid (``GridIndex``): its finite
            points' bounds and its cells' side per axis, cells per axis, where each cell's rows
            start in ``order``, the rows in cell order, their coordinates in that order.
        keys, changed: the table's int64 keys (sorted in the table) and each row's last changed
            seq, in the grid's cell order (``GridIndex.carried``).
        held: every subscriber's held keys (each run sorted), box after box; ``held_at`` the
            bounds of box ``i``'s run, ``held[held_at[i]:held_at[i + 1]]``.
        since: per box, the seq after which a held row counts as updated.

    Returns:
        ``(rows, rows_at, entered, entered_at, updated, updated_at, gone, gone_at)``: box
        ``i``'s rows are ``rows[rows_at[i]:rows_at[i + 1]]``, in key order; ``entered`` and
        ``updated`` are those not held and those held and changed since, ``gone`` the held keys
        no longer in the box, each with its bounds per box. Rows are positions in cell order.
    """
    cdef Py_ssize_t dims = lo.shape[1]
    if dims not in (2, 3) or len(binned) != dims:
        raise ValueError(f"the kernel cuts boxes of 2 or 3 axes, not {dims}")
    bits = max(1, (len(keys) - 1).bit_length())
    if (lo.shape[0] + 1).bit_length() + 2 * bits > 63:
        raise ValueError(f"{lo.shape[0]} boxes of {len(keys)} rows are too many for one turn")
    first, last = spans(lo, hi, origin, top, side, cells)
    codes_out, rows_at = _inside(lo, hi, first, last, cells, offsets, order, binned, bits)
    codes_out.sort()
    return _compare(codes_out, rows_at, keys, changed, held, held_at, since, bits)


def spans(
    const double[:, ::1] lo,
    const double[:, ::1] hi,
    const double[::1] origin,
    const double[::1] top,
    const double[::1] side,
    long long cells,
):
    """``GridIndex.spans``, the same operations in the same order (so the same answers): the
    first and last cell each box touches per axis, both widened by a relative slack; no cells
    (``last`` -1 on every axis) for a box beyond the grid's points on some axis."""
    cdef Py_ssize_t count = lo.shape[0], dims = lo.shape[1], box, axis
    first_out = np.empty((count, dims), dtype=np.int64)
    last_out = np.empty((count, dims), dtype=np.int64)
    cdef long long[:, ::1] first = first_out
    cdef long long[:, ::1] last = last_out
    cdef double a, b, pad, low, high, ceiling = <double>(cells - 1)
    cdef bint beyond
    with nogil:
        for box in range(count):
            beyond = False
            for axis in range(dims):
                a, b = lo[box, axis], hi[box, axis]
                pad = SLACK * (fabs(a) + fabs(b) + (b - a) + 1.0)
                low, high = a - pad, b + pad
                a, b = (low - origin[axis]) / side[axis], (high - origin[axis]) / side[axis]
                first[box, axis] = <long long>floor(_clip(a, ceiling))
                last[box, axis] = <long long>floor(_clip(b, ceiling))
                beyond = beyond or high < origin[axis] or low > top[axis]
            if beyond:
                for axis in range(dims):
                    last[box, axis] = -1
    return first_out, last_out


cdef inline double _clip(double value, double ceiling) noexcept nogil:
    """``numpy.clip(value, 0, ceiling)`` (``minimum(maximum(value, 0), ceiling)``)."""
    if not value >= 0.0:  # NaN never comes: the boxes and the grid are finite
        value = 0.0
    if value > ceiling:
        value = ceiling
    return value


def _inside(
    const double[:, ::1] lo,
    const double[:, ::1] hi,
    const long long[:, ::1] first,
    const long long[:, ::1] last,
    long long cells,
    const long long[::1] offsets,
    const Py_ssize_t[::1] order,
    list binned,
    int bits,
):
    """Pass 1: the rows inside each box, coded ``box, order[j], j`` (``bits`` bits for each
    position), box after box, and the bounds of each box's run."""
    cdef Py_ssize_t count = lo.shape[0], dims = lo.shape[1], box, total = 0, found = 0
    cdef const double[::1] x = binned[0]
    cdef const double[::1] y = binned[1]
    cdef const double[::1] z = binned[2] if dims == 3 else binned[0]
    cdef Grid grid
    grid.dims, grid.cells, grid.bits = dims, cells, bits
    grid.offsets, grid.order = &offsets[0], &order[0]
    grid.x, grid.y, grid.z = &x[0], &y[0], &z[0]
    with nogil:  # an upper bound: every candidate
        for box in range(count):
            total = _walk(&grid, lo, hi, first, last, box, NULL, total)
    codes_out = np.empty(max(total, 1), dtype=np.int64)
    at_out = np.zeros(count + 1, dtype=np.int64)
    cdef long long[::1] codes = codes_out
    cdef long long[::1] at = at_out
    with nogil:
        for box in range(count):
            found = _walk(&grid, lo, hi, first, last, box, &codes[0], found)
            at[box + 1] = found
    return codes_out[:found], at_out


cdef struct Grid:
    Py_ssize_t dims
    long long cells
    int bits
    const long long* offsets
    const Py_ssize_t* order
    const double* x
    const double* y
    const double* z


cdef Py_ssize_t _walk(
    const Grid* grid,
    const double[:, ::1] lo,
    const double[:, ::1] hi,
    const long long[:, ::1] first,
    const long long[:, ::1] last,
    Py_ssize_t box,
    long long* codes,
    Py_ssize_t found,
) noexcept nogil:
    """Walk the cells under box ``box``: write each row inside it to ``codes`` from ``found``
    on (``codes`` NULL: count every candidate instead); return ``found`` past them."""
    cdef Py_ssize_t dims = grid.dims, a, b, j, start, stop, base
    cdef Py_ssize_t a0, a1, b0, b1
    cdef long long cells = grid.cells, code
    cdef double value
    cdef double x_lo = lo[box, 0], x_hi = hi[box, 0], y_lo = lo[box, 1], y_hi = hi[box, 1]
    # In 2-D the third test repeats the first (passed already).
    cdef double z_lo = lo[box, 2] if dims == 3 else x_lo
    cdef double z_hi = hi[box, 2] if dims == 3 else x_hi
    a0, a1, b0, b1 = _outer(first, last, box, dims)
    for a in range(a0, a1 + 1):
        for b in range(b0, b1 + 1):
            base = ((a * cells + b) * cells) if dims == 3 else a * cells
            start = grid.offsets[base + first[box, dims - 1]]
            stop = grid.offsets[base + last[box, dims - 1] + 1]
            if codes == NULL:
                found += max(stop - start, 0)
                continue
            for j in range(start, stop):
                value = grid.x[j]
                if value < x_lo or value > x_hi:
                    continue
                value = grid.y[j]
                if value < y_lo or value > y_hi:
                    continue
                value = grid.z[j]
                if value < z_lo or value > z_hi:
                    continue
                code = (box << grid.bits) | grid.order[j]
                codes[found] = (code << grid.bits) | j
                found += 1
    return found


def _compare(
    long long[::1] codes,
    const long long[::1] rows_at,
    const long long[::1] keys,
    const long long[::1] changed,
    const long long[::1] held,
    const long long[::1] held_at,
    const long long[::1] since,
    int bits,
):
    """Pass 3: each box's sorted codes made grid positions (in place), and merged with its held
    keys."""
    cdef Py_ssize_t count = rows_at.shape[0] - 1, total = codes.shape[0]
    entered_out = np.empty(total, dtype=np.intp)
    updated_out = np.empty(total, dtype=np.intp)
    gone_out = np.empty(held.shape[0], dtype=np.int64)
    bounds_out = np.zeros((3, count + 1), dtype=np.int64)
    cdef Py_ssize_t[::1] entered = entered_out
    cdef Py_ssize_t[::1] updated = updated_out
    cdef long long[::1] gone = gone_out
    cdef long long[:, ::1] bounds = bounds_out
    cdef Py_ssize_t box, c, h, h_end, news = 0, moved = 0, left = 0
    cdef long long key, row, threshold, mask = (1 << bits) - 1
    with nogil:
        for box in range(count):
            h, h_end, threshold = held_at[box], held_at[box + 1], since[box]
            for c in range(rows_at[box], rows_at[box + 1]):
                row = codes[c] & mask
                codes[c] = row
                key = keys[row]
                while h < h_end and held[h] < key:
                    gone[left] = held[h]
                    left += 1
                    h += 1
                if h < h_end and held[h] == key:
                    h += 1
                    if changed[row] > threshold:
                        updated[moved] = row
                        moved += 1
                else:
                    entered[news] = row
                    news += 1
            while h < h_end:
                gone[left] = held[h]
                left += 1
                h += 1
            bounds[0, box + 1] = news
            bounds[1, box + 1] = moved
            bounds[2, box + 1] = left
    return (
        np.asarray(codes).view(np.intp),
        np.asarray(rows_at),
        entered_out[:news],
        bounds_out[0],
        updated_out[:moved],
        bounds_out[1],
        gone_out[:left],
        bounds_out[2],
    )


cdef inline (Py_ssize_t, Py_ssize_t, Py_ssize_t, Py_ssize_t) _outer(
    const long long[:, ::1] first, const long long[:, ::1] last, Py_ssize_t box, Py_ssize_t dims
) noexcept nogil:
    """The cell ranges of the outer axes (in 2-D, the second is ``0..0``); empty (``1..0``) when
    the box spans no cell on some axis."""
    cdef Py_ssize_t axis
    for axis in range(dims):
        if last[box, axis] < first[box, axis]:
            return 1, 0, 1, 0
    if dims == 3:
        return first[box, 0], last[box, 0], first[box, 1], last[box, 1]
    return first[box, 0], last[box, 0], 0, 0
