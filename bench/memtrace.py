"""How ``bench/memory.py`` runs a traced process (``--trace-mid``, ``--trace-publisher``), and
what it reads back from the dumps: tracemalloc snapshots, glibc's arenas (``malloc_info``),
obmalloc's arenas (``sys._debugmallocstats``), the live objects by type and ``smaps_rollup``;
and the Spark JVM's ceiling, from its flags. docs/benchmarks/memory.md says what they found.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tracemalloc
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

#: How the mid relay runs under ``--trace-mid``: ``python -c TRACED DIR EVERY FRAMES relay ...``.
TRACED = """
import collections, ctypes, gc, json, os, runpy, sys, threading, time, tracemalloc
folder, every, frames = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
sys.argv[:4] = ["fanout"]
libc = ctypes.CDLL(None)
libc.fopen.restype, libc.fopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_char_p]
libc.fclose.argtypes, libc.malloc_info.argtypes = [ctypes.c_void_p], [ctypes.c_int, ctypes.c_void_p]
if frames:
    tracemalloc.start(frames)
def objects(name, unreachable):
    types = collections.Counter(type(o).__name__ for o in gc.get_objects())
    with open("/proc/self/smaps_rollup") as rollup:
        kib = {l.split()[0][:-1]: int(l.split()[1]) for l in rollup.read().splitlines()[1:]}
    found = {"types": dict(types), "blocks": sys.getallocatedblocks(), "rollup_kib": kib}
    found["unreachable"] = unreachable
    with open(name + ".objects", "w") as out:
        json.dump(found, out)
    saved, dump = os.dup(2), os.open(name + ".pymalloc", os.O_WRONLY | os.O_CREAT, 0o644)
    os.dup2(dump, 2)  # sys._debugmallocstats writes to the C stderr: obmalloc's arenas
    try:
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(dump)
def snapshots():
    for number in range(1_000_000):
        time.sleep(every)
        name = f"{folder}/{number:05d}-{time.monotonic():.0f}"
        unreachable = gc.collect() if frames else None  # traced: what is left is reachable
        if frames:
            tracemalloc.take_snapshot().dump(name + ".trace")
        stream = libc.fopen(f"{name}.malloc".encode(), b"w")
        libc.malloc_info(0, stream)
        libc.fclose(stream)
        objects(name, unreachable)
threading.Thread(target=snapshots, daemon=True).start()
runpy.run_module("fanout", run_name="__main__", alter_sys=True)
"""


def traced_growth(folder: Path, since: float, top: int = 25) -> dict[str, Any]:
    """A traced process's allocation sites that grew most from its first snapshot taken after
    ``since`` (``time.monotonic``) to its last, by line and by traceback; and its allocator's
    arenas at each snapshot (glibc ``malloc_info``)."""
    found: dict[str, Any] = {"allocator": [_arenas(p) for p in sorted(folder.glob("*.malloc"))]}
    found["objects"] = _objects(folder, since)
    names = sorted(folder.glob("*.trace"))
    after = [p for p in names if _taken(p) >= since] or names[-1:]
    if len(after) < 2:
        return found
    ours = [tracemalloc.Filter(False, "<string>"), tracemalloc.Filter(False, tracemalloc.__file__)]
    first, last = (
        tracemalloc.Snapshot.load(str(p)).filter_traces(ours) for p in (after[0], after[-1])
    )

    def site(stat: tracemalloc.StatisticDiff) -> dict[str, Any]:
        frames = [f"{f.filename.rsplit('/src/', 1)[-1]}:{f.lineno}" for f in stat.traceback]
        return {
            "kib": round(stat.size / 1024, 1),
            "grew_kib": round(stat.size_diff / 1024, 1),
            "count": stat.count,
            "grew_count": stat.count_diff,
            "at": frames,
        }

    return found | {
        "between_s": round(_taken(after[-1]) - _taken(after[0])),
        "traced_mib": [round(sum(t.size for t in s.traces) / 2**20, 1) for s in (first, last)],
        "by_line": [site(s) for s in last.compare_to(first, "lineno")[:top]],
        "by_traceback": [site(s) for s in last.compare_to(first, "traceback")[:top]],
    }


def _taken(path: Path) -> float:
    return float(path.name.split(".")[0].split("-")[1])


def _arenas(path: Path) -> dict[str, float]:
    """One ``malloc_info`` dump: the arenas' bytes from the system, free in them, and mmapped
    blocks (MiB), when it was taken (``time.monotonic``)."""
    root = ElementTree.parse(path).getroot()
    totals = {(e.tag, e.get("type")): int(e.get("size", "0")) for e in root if e.tag != "heap"}
    return {
        "at": _taken(path),
        "arenas": len(root.findall("heap")),
        "system_mib": round(totals.get(("system", "current"), 0) / 2**20, 1),
        "free_mib": round(
            (totals.get(("total", "fast"), 0) + totals.get(("total", "rest"), 0)) / 2**20, 1
        ),
        "mmap_mib": round(totals.get(("total", "mmap"), 0) / 2**20, 1),
    }


def _objects(folder: Path, since: float, top: int = 15) -> dict[str, Any]:
    """The live objects (by type, the collector's) and obmalloc's arenas at the first dump after
    ``since`` and the last, and the types that grew most between them."""
    names = sorted(folder.glob("*.objects"))
    after = [p for p in names if _taken(p) >= since] or names[-1:]
    if len(after) < 2:
        return {}
    first, last = (json.loads(p.read_text()) for p in (after[0], after[-1]))
    grew = {k: n - first["types"].get(k, 0) for k, n in last["types"].items()}
    return {
        "between_s": round(_taken(after[-1]) - _taken(after[0])),
        "blocks": [first["blocks"], last["blocks"]],
        "objects": [sum(d["types"].values()) for d in (first, last)],
        "types_grew": dict(sorted(grew.items(), key=lambda kv: -kv[1])[:top]),
        "obmalloc_arenas": [_pymalloc(p.with_suffix(".pymalloc")) for p in (after[0], after[-1])],
        "rollup_mib": {
            key: [round(d["rollup_kib"][key] / 1024, 1) for d in (first, last)]
            for key in ("Rss", "Anonymous", "Pss_File")
        },
    }


def _pymalloc(path: Path) -> int | None:
    """obmalloc's arenas (1 MiB each) in one ``sys._debugmallocstats`` dump; None under
    ``tracemalloc``, whose hooks leave the dump without them."""
    found = re.search(r"# arenas allocated current\s*=\s*([\d,]+)", path.read_text())
    return int(found[1].replace(",", "")) if found else None


#: The flags that bound a JVM's memory outside what it sizes itself (G1's tables, threads).
BOUNDED = ("MaxHeapSize", "MaxMetaspaceSize", "ReservedCodeCacheSize", "MaxDirectMemorySize")


def jvm_ceiling(pid: int) -> dict[str, float]:
    """What a JVM's flags let it hold, MiB (``jcmd PID VM.flags -all``): its heap, metaspace,
    code cache and direct buffers (a direct-memory bound of 0 is the heap's size again), and
    their sum (``bounded``; absent when metaspace is unbounded, the JVM's default). Empty without
    ``jcmd``."""
    jcmd = shutil.which("jcmd")
    if jcmd is None:
        return {}
    command = [jcmd, str(pid), "VM.flags", "-all"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout
    found = {
        m[1]: round(int(m[2]) / 2**20, 1)
        for m in re.finditer(r"\b(\w+)\s+= (\d+)\s+\{", out)
        if m[1] in BOUNDED
    }
    if found.get("MaxDirectMemorySize") == 0:
        found["MaxDirectMemorySize"] = found["MaxHeapSize"]
    if found.get("MaxMetaspaceSize", 0) < 2**30:  # unbounded: 2^64 - 1 bytes
        found["bounded"] = round(sum(found.values()), 1)
    return found
