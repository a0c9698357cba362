"""The calibration score every benchmark records (testing/calibration.py)."""

from __future__ import annotations

import time

import numpy as np

from fanout.testing import calibration
from fanout.testing.calibration import calibrate


def test_both_workloads_are_timed() -> None:
    """The score is a median of timed repetitions (no bound on how long: the machine is
    shared, and speed is the benchmarks' to measure)."""
    started = time.perf_counter()
    score = calibrate()
    elapsed = time.perf_counter() - started
    assert set(score) == {"python_s", "numpy_s"}
    assert all(0 < seconds < float("inf") for seconds in score.values())
    # each of the repetitions takes about its median: the whole is their sum (and the input)
    assert elapsed >= calibration.REPEATS * (score["python_s"] + score["numpy_s"]) * 0.5


def test_the_workloads_are_fixed() -> None:
    # The score's definition: the same work, whatever the machine and the day.
    assert calibration.python_workload() == calibration.python_workload()
    values = np.random.default_rng(calibration.SEED).random(calibration.NUMPY_ROWS)
    inside = values[(values > 0.25) & (values < 0.75)]
    assert calibration.numpy_workload(values) == float(np.sqrt(np.sort(inside) ** 2 + 1.0).sum())
