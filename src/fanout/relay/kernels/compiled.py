"""The relay's compiled kernels (built by setup.py), or None without them.

``cutkernel`` cuts a turn of box views, ``packkernel`` packs rows into their wire bytes,
``gridkernel`` builds a buffer's grid index and ``tablekernel`` overwrites a batch's rows (both
on the writer thread, without the GIL). The install builds them when a C compiler and Python's
headers are there; otherwise fanout runs without them, and ``batchcut``, ``pushes``,
``spatial`` and ``state`` do the same with numpy and msgspec (the same answers, slower). A relay
logs which when it starts.
"""

from __future__ import annotations

from typing import Any

import numpy.typing as npt

try:
    from fanout.relay.kernels import cutkernel, gridkernel, packkernel, tablekernel
except ImportError:  # installed without a C compiler (setup.py)
    cutkernel = None  # type: ignore[assignment]
    gridkernel = None  # type: ignore[assignment]
    packkernel = None  # type: ignore[assignment]
    tablekernel = None  # type: ignore[assignment]

#: Whether this install has all the compiled kernels (it builds all or none of them).
COMPILED = all(kernel is not None for kernel in (cutkernel, gridkernel, packkernel, tablekernel))


def fixed_width(*arrays: npt.NDArray[Any]) -> bool:
    """Whether the kernels that copy rows byte-wise (``gridkernel.gather``, ``tablekernel``)
    take these arrays: 1-D, C-contiguous, items of a fixed size (no Python objects)."""
    return all(
        array.ndim == 1 and array.flags.c_contiguous and not array.dtype.hasobject
        for array in arrays
    )


__all__ = ["COMPILED", "cutkernel", "fixed_width", "gridkernel", "packkernel", "tablekernel"]
