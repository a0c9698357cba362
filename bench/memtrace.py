"""How ``bench/memory.py`` runs a traced process (``--trace-mid``, ``--trace-publisher``), and
what it reads back from the dumps: tracemalloc snapshots, glibc's arenas (``malloc_info``),
obmalloc's arenas (``sys._debugmallocstats``), the live objects by type and ``smaps_rollup``.
docs/benchmarks/memory.md says what they found.
"""

from __future__ import annotations

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
def objects(name):
    types = collections.Counter(type(o).__name__ for o in gc.get_objects())
    with open("/proc/self/smaps_rollup") as rollup:
        kib = {l.split()[0][:-1]: int(l.split()[1]) for l in rollup.read().splitlines()[1:]}
    found = {"types": dict(types), "blocks": sys.getallocatedblocks(), "rollup_kib": kib}
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
        if frames:
            tracemalloc.take_snapshot().dump(name + ".trace")
        stream = libc.fopen(f"{name}.malloc".encode(), b"w")
        libc.malloc_info(0, stream)
        libc.fclose(stream)
        objects(name)
threading.Thread(target=snapshots, daemon=True).start()
runpy.run_module("fanout", run_name="__main__", alter_sys=True)
"""
