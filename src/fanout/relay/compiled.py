"""The relay's compiled kernel (``cutkernel``, built by setup.py), or None without it.

The install builds it when a C compiler and Python's headers are there; otherwise fanout runs
without it and ``batchcut`` cuts box views with numpy (the same answers, slower). A relay logs
which when it starts.
"""

from __future__ import annotations

try:
    from fanout.relay import cutkernel
except ImportError:  # installed without a C compiler (setup.py)
    cutkernel = None  # type: ignore[assignment]

#: Whether this install cuts box views with the compiled kernel.
COMPILED = cutkernel is not None

__all__ = ["COMPILED", "cutkernel"]
