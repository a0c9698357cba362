"""A process's descendants and their command lines, read from Linux's ``/proc``.

Fault tests kill what a server started, not the server: Spark's Python workers under a
publisher's JVM, say (``tests/integration/test_faults.py``).
"""

from __future__ import annotations

from pathlib import Path

PROC = Path("/proc")


def descendants(root: int) -> dict[int, str]:
    """Every process below ``root`` (children, their children, ...): pid -> command line.

    Raises:
        FileNotFoundError: this machine has no ``/proc``.
    """
    parents: dict[int, int] = {}
    lines: dict[int, str] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # it ended meanwhile
        pid = int(entry.name)
        parents[pid] = int(stat[stat.rindex(")") + 2 :].split()[1])
        lines[pid] = argv.replace(b"\0", b" ").decode(errors="replace").strip()
    below: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in below:
                below[pid] = lines[pid]
                frontier.append(pid)
    return below
