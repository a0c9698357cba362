"""A calibration score: a fixed pure-Python workload and a fixed numpy workload, timed in the same
run as a benchmark, so that its numbers can be compared across machines and days.

Benchmarks run on shared machines whose speed differs from one run to the next (another tenant,
another CPU model, frequency scaling). Every benchmark records ``calibrate()`` in its results: a
result that is 20% slower on a day whose calibration is 20% slower says the machine changed, not
the code. The two workloads stand for what fanout's hot paths are made of: interpreted Python
(dicts, ints, strings: the event loop, the protocol) and numpy over arrays (cutting, matching,
encoding rows). Each is the median of ``REPEATS`` timings; the whole takes about a second.

The workloads are part of the score's definition: changing them makes scores incomparable with
every result recorded before, so do not.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

REPEATS = 5
PYTHON_STEPS = 600_000
NUMPY_ROWS = 1_000_000
SEED = 23


def python_workload() -> int:
    """Interpreted Python: a loop of dict updates, integer arithmetic and string formatting."""
    counts: dict[int, int] = {}
    total = 0
    for step in range(PYTHON_STEPS):
        key = step % 1009
        counts[key] = counts.get(key, 0) + (step * step) % 7
        total += len(str(step))
    return total + sum(counts.values())


def numpy_workload(values: npt.NDArray[np.float64]) -> float:
    """numpy over a million doubles: a sort, a masked selection, a gather and elementwise math."""
    order = np.argsort(values, kind="stable")
    inside = (values > 0.25) & (values < 0.75)
    picked = values[order][inside[order]]
    return float(np.sqrt(picked * picked + 1.0).sum())


def _median_seconds(work: Callable[[], object]) -> float:
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def calibrate() -> dict[str, float]:
    """Time both workloads here and now.

    Returns:
        ``{"python_s": ..., "numpy_s": ...}``: the median seconds of one run of each
        (smaller is a faster machine), rounded to the microsecond.
    """
    values = np.random.default_rng(SEED).random(NUMPY_ROWS)
    return {
        "python_s": round(_median_seconds(python_workload), 6),
        "numpy_s": round(_median_seconds(lambda: numpy_workload(values)), 6),
    }
