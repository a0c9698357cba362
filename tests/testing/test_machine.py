"""What every benchmark records and how it reports it (testing/machine.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fanout.testing.machine import (
    Memory,
    describe,
    rss,
    tree,
    tree_memory,
    tree_rss,
    write_results,
)
from fanout.testing.wait import eventually_sync


def test_the_machine_is_described_with_its_load() -> None:
    machine = describe()
    assert set(machine) == {"cpu", "cores", "memory_gib", "python", "date", "load_average_1m"}
    assert isinstance(machine["cores"], int) and machine["cores"] >= 1
    assert str(machine["python"]).startswith("3.")


def test_results_are_printed_as_one_json_object_and_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = {"machine": describe(), "calibration": {"python_s": 0.1, "numpy_s": 0.1}, "n": 3}
    path = tmp_path / "results" / "bench.json"
    write_results(results, path)
    assert json.loads(capsys.readouterr().out) == results
    assert json.loads(path.read_text()) == results
    write_results(results, None)  # printed only
    assert json.loads(capsys.readouterr().out) == results


def test_results_without_the_machine_or_the_calibration_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    with pytest.raises(ValueError, match="must hold calibration"):
        write_results({"machine": describe()}, path)
    with pytest.raises(ValueError, match="must hold machine and calibration"):
        write_results({"n": 3}, path)
    assert not path.exists()


HOLD_64_MIB = "import time; b = bytearray(64 * 2**20); print(1, flush=True); time.sleep(60)"


def test_tree_rss_counts_a_child_and_is_zero_for_no_process() -> None:
    # A child holding 64 MiB: the tree's memory grows by at least that much over the parent's.
    with subprocess.Popen([sys.executable, "-c", HOLD_64_MIB], stdout=subprocess.PIPE) as child:
        try:
            assert child.stdout is not None
            child.stdout.readline()
            alone = tree_rss(child.pid)
            assert alone >= 64 * 2**20
            assert tree_rss(os.getpid()) >= alone + rss(os.getpid())
            assert rss(os.getpid()) > 0
        finally:
            child.kill()
    assert tree_rss(child.pid) == rss(child.pid) == 0


#: Holds 64 MiB, then spawns a child that blocks before its ``exec`` (opening a FIFO for reading,
#: a file action ``posix_spawn`` runs in the child, in its parent's memory), as Java's
#: ``ProcessBuilder`` does on Linux until its child has started.
SPAWN_64_MIB = """
import os, sys
b = bytearray(64 * 2**20)
print(1, flush=True)
blocks = [(os.POSIX_SPAWN_OPEN, 3, sys.argv[1], os.O_RDONLY, 0)]
os.posix_spawn("/bin/true", ["true"], {}, file_actions=blocks)
"""


def test_a_child_in_its_parents_memory_is_counted_once(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    command = [sys.executable, "-c", SPAWN_64_MIB, str(fifo)]
    with subprocess.Popen(command, stdout=subprocess.PIPE) as parent:
        try:
            assert parent.stdout is not None
            parent.stdout.readline()
            eventually_sync(lambda: tree(parent.pid), lambda t: len(t) == 2, what="its child")
            alone = rss(parent.pid)
            assert alone >= 64 * 2**20
            assert rss(tree(parent.pid)[1]) >= 64 * 2**20  # /proc gives it its parent's
            assert alone <= tree_rss(parent.pid) < alone + 32 * 2**20
            assert tree_memory(parent.pid).rss < alone + 32 * 2**20
        finally:
            os.close(os.open(fifo, os.O_WRONLY))  # the child opens it, and execs
            parent.wait(10)


def test_tree_memory_counts_a_childs_unique_pages_and_is_zero_for_no_process() -> None:
    with subprocess.Popen([sys.executable, "-c", HOLD_64_MIB], stdout=subprocess.PIPE) as child:
        try:
            assert child.stdout is not None
            child.stdout.readline()
            alone = tree_memory(child.pid)
            assert alone.rss >= alone.pss >= alone.uss >= 64 * 2**20
            assert tree_memory(os.getpid()).uss > alone.uss  # the child, and this process
        finally:
            child.kill()
    assert tree_memory(child.pid) == Memory(0, 0, 0)


def test_per_subscriber_memory_is_the_growth_over_the_baseline_shared_out() -> None:
    baseline = Memory(rss=100 << 20, pss=80 << 20, uss=60 << 20)
    loaded = Memory(rss=(100 << 20) + 30_000_000, pss=(80 << 20) + 20_000, uss=60 << 20)
    assert loaded.per_subscriber(baseline, 1000) == {"rss": 30_000.0, "pss": 20.0, "uss": 0.0}
    assert baseline.per_subscriber(loaded, 10)["rss"] == -3_000_000.0  # it shrank: said so
    with pytest.raises(ValueError, match="subscribers must be >= 1"):
        loaded.per_subscriber(baseline, 0)
