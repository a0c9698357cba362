# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""Overwriting a batch's rows in a table (``state.Table.upsert``), and copying a table
(``Table.copy_from``), in compiled code without the GIL.

The relay's writer thread applies every batch while the event loop serves pushes. In numpy,
finding the batch's keys in the table and overwriting each column's rows is some twenty calls,
and with the loop busy the thread waits for the GIL after each (``gridkernel`` says more). Here
it is one pass: each key is found by walking the table's sorted keys alongside the batch's
when those are sorted too (publishers send them so), else by binary search; each found row is
copied into every column and its changed seq set. Copying a table (the inert buffer catching
up with the active one) is one pass of ``memcpy`` for all its columns.

The answers are the numpy path's exactly: ``tests/relay/kernels/test_tablekernel.py`` checks it.
"""

from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

import numpy as np


def overwrite(
    const long long[::1] held,
    const long long[::1] keys,
    list targets,
    list sources,
    long long[::1] changed,
    long long seq,
):
    """Overwrite the rows of ``keys`` that ``held`` holds; returns where each key is held.

    Args:
        held: the table's keys, sorted, unique.
        keys: the batch's keys, unique.
        targets: the table's columns (writable, C-contiguous, fixed-size items), as long as
            ``held``.
        sources: the batch's columns, in the same order and of the same item sizes, as long as
            ``keys``.
        changed: the table's changed seqs; set to ``seq`` where a row is overwritten.
        seq: the batch's seq.

    Returns:
        The position of each key in ``held``, or -1 (intp): the rows to insert are those.

    Raises:
        ValueError: columns that do not match, object columns, or unsorted held keys.
    """
    cdef Py_ssize_t count = len(targets), rows = keys.shape[0], size = held.shape[0]
    cdef Py_ssize_t i, row
    if len(sources) != count:
        raise ValueError(f"{count} target columns but {len(sources)} source columns")
    if changed.shape[0] != size:
        raise ValueError(f"changed has {changed.shape[0]} rows, not {size}")
    for i in range(count):
        target, source = targets[i], sources[i]
        for array, length, what in ((target, size, "target"), (source, rows, "source")):
            if array.dtype.hasobject or array.ndim != 1 or not array.flags.c_contiguous:
                raise ValueError(f"{what} column {i} ({array.dtype}) is not contiguous fixed items")
            if len(array) != length:
                raise ValueError(f"{what} column {i} has {len(array)} rows, not {length}")
        if target.dtype.itemsize != source.dtype.itemsize:
            raise ValueError(f"column {i}: items of {source.dtype} into {target.dtype}")
        if not target.flags.writeable:
            raise ValueError(f"target column {i} is read-only")
    at_array = np.full(rows, -1, dtype=np.intp)
    cdef Py_ssize_t[::1] at = at_array
    cdef bint ordered = True, held_ordered = True
    with nogil:
        for row in range(1, size):
            if held[row] <= held[row - 1]:
                held_ordered = False
        for row in range(1, rows):
            if keys[row] <= keys[row - 1]:
                ordered = False
    if not held_ordered:
        raise ValueError("held keys are not sorted and unique")
    if rows == 0 or size == 0:
        return at_array
    cdef char** to = <char**>malloc(count * sizeof(char*))
    cdef const char** from_ = <const char**>malloc(count * sizeof(char*))
    cdef Py_ssize_t* sizes = <Py_ssize_t*>malloc(count * sizeof(Py_ssize_t))
    cdef unsigned char[::1] target_bytes
    cdef const unsigned char[::1] source_bytes
    cdef Py_ssize_t low, high, middle, walk = 0, width, where
    cdef long long key
    try:
        if to == NULL or from_ == NULL or sizes == NULL:
            raise MemoryError()
        for i in range(count):
            target_bytes = targets[i].view(np.uint8)
            source_bytes = sources[i].view(np.uint8)
            to[i] = <char*>&target_bytes[0]
            from_[i] = <const char*>&source_bytes[0]
            sizes[i] = targets[i].dtype.itemsize
        with nogil:
            for row in range(rows):
                key = keys[row]
                if ordered:  # walk on from the last key's place
                    while walk < size and held[walk] < key:
                        walk += 1
                    where = walk
                else:
                    low, high = 0, size
                    while low < high:
                        middle = (low + high) // 2
                        if held[middle] < key:
                            low = middle + 1
                        else:
                            high = middle
                    where = low
                if where >= size or held[where] != key:
                    continue
                at[row] = where
                changed[where] = seq
                for i in range(count):
                    width = sizes[i]
                    if width == 8:
                        (<long long*>to[i])[where] = (<const long long*>from_[i])[row]
                    elif width == 4:
                        (<int*>to[i])[where] = (<const int*>from_[i])[row]
                    else:
                        memcpy(to[i] + where * width, from_[i] + row * width, width)
    finally:
        free(to)
        free(from_)
        free(sizes)
    return at_array


def copies(list arrays):
    """``[array.copy() for array in arrays]``, the copying in one pass without the GIL.

    Raises:
        ValueError: an object array or a non-contiguous one.
    """
    cdef Py_ssize_t count = len(arrays), i
    results = []
    for i in range(count):
        array = arrays[i]
        if array.dtype.hasobject or array.ndim != 1 or not array.flags.c_contiguous:
            raise ValueError(f"array {i} ({array.dtype}) is not a contiguous array of fixed items")
        results.append(np.empty_like(array))
    cdef char** to = <char**>malloc(count * sizeof(char*))
    cdef const char** from_ = <const char**>malloc(count * sizeof(char*))
    cdef Py_ssize_t* sizes = <Py_ssize_t*>malloc(count * sizeof(Py_ssize_t))
    cdef unsigned char[::1] target_bytes
    cdef const unsigned char[::1] source_bytes
    try:
        if to == NULL or from_ == NULL or sizes == NULL:
            raise MemoryError()
        for i in range(count):
            sizes[i] = arrays[i].nbytes
            if sizes[i]:
                target_bytes = results[i].view(np.uint8)
                source_bytes = arrays[i].view(np.uint8)
                to[i] = <char*>&target_bytes[0]
                from_[i] = <const char*>&source_bytes[0]
        with nogil:
            for i in range(count):
                if sizes[i]:
                    memcpy(to[i], from_[i], sizes[i])
    finally:
        free(to)
        free(from_)
        free(sizes)
    return results
