"""Where each process's resident memory is (issue 45, item 5): beside a ``bench/memory.py`` run,
every ``--every`` seconds, each process under ``--pid`` (the bench) by its mappings (glibc's
``[heap]``, anonymous mappings, files, stacks; RSS and PSS) and, for a JVM started with
``-XX:NativeMemoryTracking=summary``, its own accounts (``jcmd VM.native_memory summary``).

Run ``.venv/bin/python bench/memprobe.py --pid BENCH_PID --out FILE``: one JSON object a line,
until the bench exits. docs/benchmarks/memory.md says what it found.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from fanout.testing.machine import tree

KINDS = {"[heap]": "heap", "[stack]": "stack"}


def mappings(pid: int) -> dict[str, Any]:
    """One process's RSS and PSS (KiB) by kind of mapping, from ``/proc/PID/smaps``."""
    kinds: dict[str, dict[str, int]] = {}
    kind = ""
    text = (Path("/proc") / str(pid) / "smaps").read_text()
    big_anon = 0
    for line in text.splitlines():
        head = line.split(maxsplit=5)
        if re.fullmatch(r"[0-9a-f]+-[0-9a-f]+", head[0]):
            name = head[5] if len(head) > 5 else ""
            kind = KINDS.get(name, "anon" if not name else "file" if name[0] == "/" else "other")
            kinds.setdefault(kind, {"rss": 0, "pss": 0, "maps": 0})["maps"] += 1
        elif head[0] in ("Rss:", "Pss:"):
            kinds[kind][head[0][:-1].lower()] += int(head[1])
            if kind == "anon" and head[0] == "Rss:" and int(head[1]) >= 1024:
                big_anon += 1
    comm = (Path("/proc") / str(pid) / "comm").read_text().strip()
    return {"pid": pid, "comm": comm, "kinds": kinds, "anon_maps_1mib_plus": big_anon}


def nmt(pid: int) -> dict[str, Any] | None:
    """A JVM's native memory by category (reserved, committed KiB), or None without NMT."""
    jcmd = shutil.which("jcmd")
    if jcmd is None:
        return None
    done = subprocess.run(
        [jcmd, str(pid), "VM.native_memory", "summary"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    found = {}
    for match in re.finditer(r"-\s+([\w ]+?) \(reserved=(\d+)KB, committed=(\d+)KB\)", done.stdout):
        found[match[1].strip()] = [int(match[2]), int(match[3])]
    total = re.search(r"Total: reserved=(\d+)KB, committed=(\d+)KB", done.stdout)
    if total:
        found["Total"] = [int(total[1]), int(total[2])]
    return found or None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pid", type=int, required=True, help="the bench's pid")
    parser.add_argument("--out", type=Path, required=True, help="JSON lines here")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    args = parser.parse_args()
    with args.out.open("a") as out:
        while Path(f"/proc/{args.pid}").exists():
            row: dict[str, Any] = {"t": time.time(), "load": Path("/proc/loadavg").read_text()}
            row["procs"] = []
            for pid in tree(args.pid):
                try:
                    found = mappings(pid)
                    cmd = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
                    found["cmd"] = " ".join(c.decode(errors="replace") for c in cmd[:6])[:160]
                    if found["comm"] == "java":
                        found["nmt"] = nmt(pid)
                except (FileNotFoundError, ProcessLookupError, subprocess.TimeoutExpired):
                    continue
                row["procs"].append(found)
            out.write(json.dumps(row) + "\n")
            out.flush()
            time.sleep(args.every)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
