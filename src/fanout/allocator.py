"""glibc's allocator held to what a long-running server uses (issue 45, item 5).

A relay's and the publisher's Python heaps stay level over hours while their resident memory
grows: glibc keeps what is freed after a burst. Its *dynamic* mmap threshold rises to the size of
each large block freed (a batch's columns, a snapshot's rows), so later ones come from the heap
and stay there once freed; each thread's arena (the publisher's Py4J threads) holds its own free
memory (docs/benchmarks/memory.md). ``trim`` gives every arena's free pages back
(``malloc_trim(0)``, timed in ``trim_seconds``): a relay's ``trimming`` task and the publisher's
main loop call it every few seconds. ``tune`` fixes the threshold (``mallopt``), an operator's
setting. On a C library other than glibc they do nothing and say so once in the log.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import logging
import os
import time
from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from fanout import metrics

log = logging.getLogger(__name__)

#: ``mallopt``'s option for the mmap threshold (glibc's ``malloc.h``).
M_MMAP_THRESHOLD = -3
#: The largest threshold glibc documents on 64-bit (``DEFAULT_MMAP_THRESHOLD_MAX``; ``mallopt(3)``).
MAX_MMAP_THRESHOLD = 32 * 2**20

trim_seconds = metrics.Histogram(
    "malloc_trim_seconds",
    "Seconds each malloc_trim(0) took, giving glibc's free pages back to the system.",
    (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1),
)


class TrimCollector:
    """``trim_seconds`` as one of prometheus_client's collectors (the publisher's ``/metrics``,
    ``metrics.route``'s ``collectors``; the relay lists the histogram itself)."""

    def collect(self) -> Iterator[Metric]:
        """The histogram's family."""
        yield trim_seconds.family()


@functools.cache
def glibc() -> ctypes.CDLL | None:
    """The process's C library if it is glibc (``mallopt`` and ``malloc_trim`` in it), else
    None, said once in the log."""
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):  # not a name this platform knows
        version = None
    if not version or not version.startswith("glibc"):
        log.info("allocator settings skipped: the C library is not glibc")
        return None
    libc = ctypes.CDLL(None)
    libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    return libc


def tune(mmap_threshold: int) -> bool:
    """Fix glibc's mmap threshold at ``mmap_threshold`` bytes (0: leave its dynamic one).

    Blocks of that size or more that do not fit in the heap's free memory are then mapped
    apart and unmapped when freed, whatever was freed before. Returns whether it was set.

    Raises:
        ValueError: glibc refused the value.
    """
    libc = glibc()
    if libc is None or mmap_threshold <= 0:
        return False
    if not libc.mallopt(M_MMAP_THRESHOLD, mmap_threshold):
        raise ValueError(f"glibc refused an mmap threshold of {mmap_threshold} bytes")
    log.info("glibc's mmap threshold fixed at %d bytes", mmap_threshold)
    return True


def trim() -> bool:
    """Give glibc's free pages back to the system now (``malloc_trim(0)``), timed in
    ``trim_seconds``. Returns whether glibc gave any back (False elsewhere than glibc)."""
    libc = glibc()
    if libc is None:
        return False
    started = time.perf_counter()
    released = bool(libc.malloc_trim(0))
    trim_seconds.observe(time.perf_counter() - started)
    return released


async def trimming(every: float) -> None:
    """``trim`` every ``every`` seconds until cancelled (0, or not glibc: return at once).

    On the event loop's thread: it took 0.3-0.7 ms in a relay (``trim_seconds``;
    ``bench/memory.py``), and from another thread it would hold the arenas' locks against the
    loop's allocations as long.
    """
    if every <= 0 or glibc() is None:
        return
    while True:
        await asyncio.sleep(every)
        trim()
