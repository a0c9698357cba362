"""What every benchmark records about the machine its numbers come from, and how it reports them.

A benchmark is a program a stranger can rerun: it prints one JSON object last, with the machine
it ran on (:func:`describe`) and a calibration score timed in the same run
(``fanout.testing.calibration.calibrate``) in it; :func:`write_results` refuses results that lack
either.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import json
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: What every benchmark's results must hold.
REQUIRED = ("machine", "calibration")


def describe() -> dict[str, object]:
    """CPU model, cores, memory, Python, date and the one-minute load average.

    The machines are shared: the load at the start says how quiet this one was.
    """
    model, memory = "unknown", None
    cpuinfo, meminfo = Path("/proc/cpuinfo"), Path("/proc/meminfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    if meminfo.exists():
        memory = round(int(meminfo.read_text().split()[1]) / 2**20, 1)
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": memory,
        "python": platform.python_version(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def write_results(results: Mapping[str, object], path: Path | None) -> None:
    """Print a benchmark's results as one JSON object and, unless ``path`` is None, write them
    there (``bench/results/``).

    Raises:
        ValueError: ``results`` lack the machine description or the calibration score.
    """
    missing = [name for name in REQUIRED if name not in results]
    if missing:
        raise ValueError(f"a benchmark's results must hold {' and '.join(missing)}")
    text = json.dumps(results, indent=2)
    print(text)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")


def rss(pid: int) -> int:
    """The resident memory of one process, in bytes (Linux ``/proc``); 0 when it does not
    exist (or is exiting while being read)."""
    try:
        for line in (Path("/proc") / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def tree_rss(pid: int) -> int:
    """The resident memory of a process and all its descendants, in bytes (Linux ``/proc``).

    A publisher's memory is its own and its Spark JVM's (a child); a process that has exited
    (or is exiting) while being read counts as 0, and so does a child still in its parent's
    address space (:func:`spaces`: its ``VmRSS`` is its parent's).

    Args:
        pid: the root process.

    Returns:
        The sum of ``VmRSS`` over the tree's address spaces; 0 when ``pid`` does not exist.
    """
    return sum(rss(each) for each in spaces(pid))


def spaces(pid: int) -> list[int]:
    """A process and its descendants, less those that share their parent's address space.

    A child spawned by ``vfork`` or ``posix_spawn`` (glibc's clones with ``CLONE_VM``) runs in
    its parent's memory until it calls ``exec``, and ``/proc`` gives it its parent's ``VmRSS``
    meanwhile: a Spark JVM spawns a few such children a micro-batch (Hadoop's local file system
    runs ``chmod`` and ``readlink``), and summing them counted the JVM two to four times
    (docs/benchmarks/memory.md).
    """
    found = []
    for each in tree(pid):
        parent = _parent(each)
        if each == pid or parent is None or not _same_memory(each, parent):
            found.append(each)
    return found


#: ``kcmp(2)``'s system call number, by machine, and its type that compares address spaces.
_KCMP = {"x86_64": 312, "aarch64": 272}.get(platform.machine())
_KCMP_VM = 1
_LIBC = ctypes.CDLL(None, use_errno=True)


def _same_memory(pid: int, other: int) -> bool:
    """Whether two processes share one address space (``kcmp(2)``, ``KCMP_VM``); False where
    the call is not known (another machine) and for a process that has exited."""
    if _KCMP is None:
        return False
    return bool(_LIBC.syscall(_KCMP, pid, other, _KCMP_VM, 0, 0) == 0)


def _parent(pid: int) -> int | None:
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def tree(pid: int) -> list[int]:
    """A process and all its descendants (Linux ``/proc``); those that exited while being
    read are left out of their parents' children."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        try:
            for task in (Path("/proc") / str(current) / "task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) one process has used so far, in seconds (Linux
    ``/proc``); 0 when it does not exist."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()  # after the command, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Memory:
    """A process tree's memory at one moment, in bytes (Linux ``/proc/PID/smaps_rollup``).

    Attributes:
        rss: resident (what ``VmRSS`` says, summed over the tree).
        pss: proportional: each shared page divided among the processes mapping it.
        uss: unique: the pages only this tree's processes map (private clean + dirty).
    """

    rss: int
    pss: int
    uss: int

    def per_subscriber(self, baseline: Memory, subscribers: int) -> dict[str, float]:
        """What each of ``subscribers`` cost over ``baseline`` (the same process without them):
        ``(this - baseline) / subscribers`` for each of rss, pss and uss, in bytes."""
        if subscribers <= 0:
            raise ValueError(f"subscribers must be >= 1, not {subscribers}")
        return {
            name: (getattr(self, name) - getattr(baseline, name)) / subscribers
            for name in ("rss", "pss", "uss")
        }


_ROLLUP = {"Rss": "rss", "Pss": "pss", "Private_Clean": "uss", "Private_Dirty": "uss"}


def tree_memory(pid: int) -> Memory:
    """The resident, proportional and unique memory of a process and all its descendants
    (what psutil's ``memory_full_info`` reads, from the same file); a process that has exited
    counts as 0, and so does a child still in its parent's address space (:func:`spaces`)."""
    total = {"rss": 0, "pss": 0, "uss": 0}
    for each in spaces(pid):
        try:
            text = (Path("/proc") / str(each) / "smaps_rollup").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        for line in text.splitlines()[1:]:
            name, value, *_ = line.split()
            if (field := _ROLLUP.get(name.rstrip(":"))) is not None:
                total[field] += int(value) * 1024
    return Memory(**total)
