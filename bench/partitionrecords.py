"""What the relays of a map of responsibility say of themselves, read from their JSON logs:
when each served its parts and when another's map lacked it (``bench/partitions.py``'s
``double_served_s``: seconds two relays served the same part)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

LEASE = 3.0  # the map's --registry-lease (the default)


def records(log: Path, says: str) -> list[tuple[float, str]]:
    """(time, message) of the JSON records of ``log`` whose message starts with ``says``."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{") and (entry := json.loads(line))["message"].startswith(says):
            found.append((datetime.fromisoformat(entry["time"]).timestamp(), entry["message"]))
    return found


def serving(log: Path, began: float, ended: float) -> list[tuple[float, float]]:
    """When a relay of the map served its parts, from its own records: from ``began`` to its
    lease lapsing, and from a lease after it came back on."""
    intervals: list[tuple[float, float]] = []
    since: float | None = began
    events = sorted(
        [(t, "lapsed") for t, _ in records(log, "registry: lease lapsed")]
        + [(t + LEASE, "back") for t, _ in records(log, "registry: back in the map")]
    )
    for at, what in events:
        if what == "lapsed" and since is not None:
            intervals.append((since, at))
            since = None
        elif what == "back":
            since = at
    return [*intervals, (since, ended)] if since is not None else intervals


def without(log: Path, name: str, began: float, ended: float) -> list[tuple[float, float]]:
    """When the map a relay read (its ``members now`` records) lacked relay ``name``."""
    intervals: list[tuple[float, float]] = []
    start: float | None = None
    for at, text in records(log, "registry: members now"):
        has = name in text.split("members now ", 1)[1].split(", ")
        if at >= began and not has and start is None:
            start = at
        elif has and start is not None:
            intervals.append((start, at))
            start = None
    return [*intervals, (start, ended)] if start is not None else intervals


def double_served(logs: dict[str, Path], began: float, ended: float) -> float:
    """Seconds a relay of the map served its parts while another relay's map lacked it (that
    relay took its parts), summed over the pairs."""
    total = 0.0
    for name, log in logs.items():
        for other, other_log in logs.items():
            if other == name:
                continue
            for a0, a1 in serving(log, began, ended):
                for b0, b1 in without(other_log, name, began, ended):
                    total += max(0.0, min(a1, b1) - max(a0, b0))
    return total
