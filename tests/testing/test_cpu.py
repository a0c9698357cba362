"""CPU time sampled from a process, a process tree and the machine (testing/cpu.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fanout.testing import cpu
from fanout.testing.cpu import CpuSample

linux = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads Linux's /proc")

#: A child that spends about this many CPU seconds, then exits.
BURN = 0.3
BURNER = f"import time\nend = time.process_time() + {BURN}\nwhile time.process_time() < end: pass"


def burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_cores_are_cpu_seconds_a_second_between_two_samples() -> None:
    assert CpuSample(10.0, 3.0).cores_since(CpuSample(8.0, 2.0)) == 0.5
    assert CpuSample(8.0, 3.0).cores_since(CpuSample(8.0, 2.0)) == 0.0  # no time passed


def test_this_process_counts_its_own_work() -> None:
    before = cpu.this_process()
    burn(0.1)
    after = cpu.this_process()
    assert after.seconds - before.seconds >= 0.1
    assert 0 < after.cores_since(before) <= (os.cpu_count() or 1) + 0.1


@linux
def test_a_process_tree_counts_children_that_have_ended_too() -> None:
    before = cpu.process_tree(os.getpid())
    subprocess.run([sys.executable, "-c", BURNER], check=True)  # started, waited for, reaped
    after = cpu.process_tree(os.getpid())
    assert after.seconds - before.seconds >= BURN * 0.9  # clock ticks are 10 ms


@linux
def test_a_process_tree_counts_live_children() -> None:
    child = subprocess.Popen([sys.executable, "-c", BURNER.replace(f"{BURN}", "30")])
    try:
        before = cpu.process_tree(os.getpid())
        time.sleep(0.3)
        after = cpu.process_tree(os.getpid())
        assert after.seconds - before.seconds > 0.05  # the child, alive, is part of the tree
        assert cpu.process_tree(child.pid).seconds <= after.seconds
    finally:
        child.kill()
        child.wait()


@linux
def test_the_machine_is_busy_at_least_while_this_process_works() -> None:
    before = cpu.machine()
    burn(0.2)
    after = cpu.machine()
    assert before is not None and after is not None
    assert after.seconds - before.seconds >= 0.15
    fraction = cpu.busy_fraction(0.1)
    assert fraction is not None and 0.0 <= fraction <= 1.0


def test_without_proc_stat_the_machine_is_not_sampled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu, "PROC", Path("/nonexistent"))
    assert cpu.machine() is None
    assert cpu.busy_fraction(0.0) is None
