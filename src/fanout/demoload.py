"""The load ``fanout demo`` runs its simulation at: one the pipeline keeps near its floor here.

A tick's latency is about one and a half micro-batches when they run back to back, and a
micro-batch costs a fixed part (Spark's floor: the source, the state store, the checkpoint)
plus a part per changed row. Near the floor means the per-row part stays small beside the fixed
one: ``bench/latency.py`` measured the rows a micro-batch can take before its duration grows
past the floor's by half (docs/benchmarks.md, "Latency"), about ``UPDATES_PER_CORE`` changed
rows per second per core on the 2-core machine it ran on. The demo offers that much per core
of this machine (Spark runs ``local[*]``), by how often each agent moves.
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
