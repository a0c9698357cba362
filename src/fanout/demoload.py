"""The load ``fanout demo`` runs its simulation at: one the pipeline keeps near its floor here.

A tick's latency is about one and a half micro-batches when they run back to back, and a
micro-batch costs a fixed part (Spark's floor: the source, the state store, the checkpoint)
plus a part per changed row. ``bench/latency.py`` (docs/benchmarks/latency.md) saw the
pipeline keep pace with 1,000 updates/s on ``local[2]`` with micro-batches of 1.3-1.6 s, and
with 10,000 in one run of three, on a loaded 2-core machine. The demo offers
``UPDATES_PER_CORE`` per core of this machine (Spark runs ``local[*]``) by how often each agent
moves: a load whose micro-batches stay near the fixed part rather than grow with rows.
"""

from __future__ import annotations

import math
import os

#: Changed rows per second per core the demo offers (see the module docstring).
UPDATES_PER_CORE = 1_000


def demo_period(agents: int, rate: float, cores: int | None = None) -> int:
    """The simulation period (each agent moves once every ``period`` ticks) that offers
    ``UPDATES_PER_CORE`` updates per second per core.

    Args:
        agents: how many agents the simulation moves.
        rate: its ticks per second.
        cores: this machine's cores (default: ``os.cpu_count()``).

    Returns:
        A period >= 1 (1: every agent every tick, when that is less than the cores allow).
    """
    cores = cores or os.cpu_count() or 1
    offered_at_one = agents * rate  # updates per second with every agent moving every tick
    return max(1, math.ceil(offered_at_one / (UPDATES_PER_CORE * cores)))
