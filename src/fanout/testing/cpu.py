"""CPU time, sampled: of this process, of a process and everything it started, of the whole
machine. For benchmarks, which report cores used over a window (the difference of two samples
over the wall-clock time between them)::

    before = process_tree(publisher.pid)
    ...
    cores = process_tree(publisher.pid).cores_since(before)

CPU time, unlike latency, does not grow when other processes take the cores; the machine's own
busy time says how much the rest of a shared machine took meanwhile. The process-tree and
machine samples read Linux's ``/proc``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds used so far, and when that was read.

    Attributes:
        at: wall-clock time of the sample (``time.time()``: comparable across processes).
        seconds: CPU seconds (user + system) used so far.
    """

    at: float
    seconds: float

    def cores_since(self, before: CpuSample) -> float:
        """Cores used on average between ``before`` and this sample (CPU seconds a second)."""
        wall = self.at - before.at
        return (self.seconds - before.seconds) / wall if wall > 0 else 0.0


def this_process() -> CpuSample:
    """This process's CPU time (every thread of it)."""
    return CpuSample(time.time(), time.process_time())


def process_tree(root: int) -> CpuSample:
    """CPU time used so far by process ``root`` and every process below it.

    A child's time moves into its parent's ``cutime``/``cstime`` when the parent reaps it, so
    live processes' own times and their reaped children's together count every process of the
    tree once (Spark's JVM forks Python workers that come and go).

    Raises:
        FileNotFoundError: this machine has no ``/proc``.
    """
    at = time.time()
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue  # it ended meanwhile
        fields = text[text.rindex(")") + 2 :].split()
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        ticks[pid] = sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier.extend(children)
    return CpuSample(at, sum(ticks.get(pid, 0) for pid in tree) / os.sysconf("SC_CLK_TCK"))


def _machine_ticks() -> tuple[int, int] | None:
    """(busy, all) clock ticks of every core so far, from ``/proc/stat``; None without it."""
    stat = PROC / "stat"
    if not stat.exists():
        return None
    # user nice system idle iowait irq softirq steal (guest time is already in user and nice)
    fields = [int(v) for v in stat.read_text().splitlines()[0].split()[1:9]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def machine() -> CpuSample | None:
    """CPU seconds every core of the machine has spent busy so far (every process's, ours
    included); None where there is no ``/proc/stat``."""
    at = time.time()
    ticks = _machine_ticks()
    return None if ticks is None else CpuSample(at, ticks[0] / os.sysconf("SC_CLK_TCK"))


def busy_fraction(seconds: float) -> float | None:
    """The fraction of all cores' time spent busy over the next ``seconds`` (it sleeps that
    long); None where there is no ``/proc/stat``."""
    first = _machine_ticks()
    time.sleep(seconds)
    last = _machine_ticks()
    if first is None or last is None:
        return None
    return (last[0] - first[0]) / max(1, last[1] - first[1])
