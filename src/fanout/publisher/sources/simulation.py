"""The built-in ``simulation`` source: agents moving in a 2-D or 3-D world, as a Spark stream.

Positions are a closed-form function of (seed, agent, tick): each agent drifts along a straight
line with a sinusoidal wander and bounces off the walls of ``[0, world]``. So ``read()`` is
deterministic for an offset range (Spark re-running a batch after a restart gets the same rows,
which exactly-once delivery rests on) and executors need no state.

Ticks are wall-clock driven: tick ``t`` happens at ``start_time + t / rate``, ``start_time``
fixed when the checkpoint is created, so the clock continues across restarts. Agent ``i`` moves
at the ticks where ``t % period == i % period``. A micro-batch covers the ticks ``(start, end]``:
every move in it (``emit = "every"``) or each agent's last (``"latest"``, the default: a slow
micro-batch does not make the next one bigger). Its settings: docs/configuration.md.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows

from fanout.errors import ConfigError
from fanout.publisher.admission import TickAdmission

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SimulationParams:
    """Everything that determines the simulated world.

    Attributes:
        agents: number of agents (keys ``0 .. agents-1``).
        dims: 2 or 3.
        rate: ticks per second of wall-clock time.
        world: side of the cubic world ``[0, world]``.
        speed: mean agent speed in world units per second.
        seed: seeds every agent's start, velocity and wander.
        period: each agent moves once every ``period`` ticks.
        max_ticks: the simulation stops after this tick (0 = never).
        max_ticks_per_batch: admission control: a micro-batch covers at most this many ticks
            (unless Spark asks for everything available, as ``availableNow`` triggers do).
        admission: ``latency`` (default): a micro-batch takes at most about twice the ticks
            that arrived during recent ones, ``max_ticks_per_batch`` at most
            (``publisher.admission``); ``fixed``: always up to ``max_ticks_per_batch``.
        partitions: how many Spark partitions share the agents.
        start_time: wall-clock time (epoch seconds) of tick 0.
    """

    agents: int = 10_000
    dims: int = 2
    rate: float = 10.0
    world: float = 1000.0
    speed: float = 20.0
    seed: int = 0
    period: int = 1
    max_ticks: int = 0
    max_ticks_per_batch: int = 600
    partitions: int = 2
    start_time: float = 0.0
    emit: str = "latest"
    admission: str = "latency"

    def __post_init__(self) -> None:
        checks = {
            "agents": self.agents >= 1,
            "dims": self.dims in (2, 3),
            "rate": self.rate > 0,
            "world": self.world > 0,
            "speed": self.speed >= 0,
            "period": self.period >= 1,
            "max_ticks": self.max_ticks >= 0,
            "max_ticks_per_batch": self.max_ticks_per_batch >= 1,
            "partitions": self.partitions >= 1,
            "emit": self.emit in ("latest", "every"),
            "admission": self.admission in ("latency", "fixed"),
        }
        for name, ok in checks.items():
            if not ok:
                raise ConfigError(f"simulation option {name}={getattr(self, name)!r} is invalid")

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> SimulationParams:
        """Build from Spark source options (all strings); unknown options are errors."""
        fields = cls.__dataclass_fields__
        unknown = sorted(set(options) - set(fields))
        if unknown:
            raise ConfigError(f"unknown simulation option(s): {', '.join(unknown)}")
        values: dict[str, int | float | str] = {}
        for name, raw in options.items():
            kind = {"int": int, "float": float, "str": str}[str(fields[name].type)]
            try:
                values[name] = kind(raw)
            except ValueError:
                raise ConfigError(f"simulation option {name}={raw!r} is not a number") from None
        return cls(**values)  # type: ignore[arg-type]

    def to_options(self) -> dict[str, str]:
        """The Spark source options that rebuild these parameters."""
        return {name: str(getattr(self, name)) for name in self.__dataclass_fields__}

    def schema(self) -> str:
        """The Spark DDL schema of the rows this simulation produces."""
        coords = ", ".join(f"{axis} double" for axis in AXES[: self.dims])
        return f"id long, {coords}, kind int, tick long, ts double"

    def tick_time(self, tick: int) -> float:
        """Wall-clock time at which ``tick`` happens."""
        return self.start_time + tick / self.rate


AXES = ("x", "y", "z")
KINDS = 4


def agent_ids_at(params: SimulationParams, tick: int, lo: int, hi: int) -> npt.NDArray[np.int64]:
    """Ids in ``[lo, hi)`` of the agents that move at ``tick``."""
    first = lo + (tick - lo) % params.period
    return np.arange(first, hi, params.period, dtype=np.int64)


def last_moves(
    params: SimulationParams, first: int, last: int, lo: int, hi: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Agents in ``[lo, hi)`` that move in ticks ``(first, last]``, and their last move's tick."""
    ids = np.arange(lo, hi, dtype=np.int64)
    ticks = last - (last - ids) % params.period
    moved = ticks > first
    return ids[moved], ticks[moved]


def positions(
    params: SimulationParams, ids: npt.NDArray[np.int64], tick: int | npt.NDArray[np.int64]
) -> list[FloatArray]:
    """Closed-form positions of agents ``ids`` at ``tick`` (one tick, or one per agent)."""
    seconds = np.asarray(tick, dtype=np.float64) / params.rate
    out: list[FloatArray] = []
    for axis in range(params.dims):
        start, velocity, amplitude, omega, phase = _motion(params, ids, axis)
        raw = start + velocity * seconds + amplitude * np.sin(omega * seconds + phase)
        out.append(_bounce(raw, params.world))
    return out


def kinds(params: SimulationParams, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int32]:
    """Each agent's fixed kind (0..3), an attribute to filter and project on."""
    return (_hash(params.seed, ids, 7) * KINDS).astype(np.int32)


def _motion(
    params: SimulationParams, ids: npt.NDArray[np.int64], axis: int
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    # Per-agent constants come from a counter-based hash, not a sequential RNG, so any subset of
    # agents can be computed on any executor without generating the others.
    start = _hash(params.seed, ids, 10 * axis + 1) * params.world
    direction = _hash(params.seed, ids, 10 * axis + 2) * 2.0 - 1.0
    velocity = direction * params.speed * math.sqrt(params.dims) / 2.0
    amplitude = _hash(params.seed, ids, 10 * axis + 3) * params.speed
    omega = 0.2 + _hash(params.seed, ids, 10 * axis + 4)
    phase = _hash(params.seed, ids, 10 * axis + 5) * 2.0 * math.pi
    return start, velocity, amplitude, omega, phase


def _hash(seed: int, ids: npt.NDArray[np.int64], salt: int) -> FloatArray:
    """Uniform [0, 1) floats from (seed, id, salt) via the splitmix64 finaliser."""
    with np.errstate(over="ignore"):
        z = ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        z ^= np.uint64((seed * 0x632BE59BD9B4E019 + salt * 0x94D049BB133111EB) % 2**64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return (z >> np.uint64(11)).astype(np.float64) / float(2**53)


def _bounce(raw: FloatArray, world: float) -> FloatArray:
    # A triangle wave folds an unbounded straight line into [0, world]: reflection off the walls.
    folded = np.mod(raw, 2.0 * world)
    return world - np.abs(folded - world)


def tick_rows(params: SimulationParams, tick: int, lo: int, hi: int) -> pa.RecordBatch:
    """The rows of the agents in ``[lo, hi)`` that move at ``tick``, as one Arrow batch."""
    ids = agent_ids_at(params, tick, lo, hi)
    return rows_at(params, ids, np.full(len(ids), tick, dtype=np.int64))


def rows_at(
    params: SimulationParams, ids: npt.NDArray[np.int64], ticks: npt.NDArray[np.int64]
) -> pa.RecordBatch:
    """The rows of agents ``ids``, each at its own tick, as one Arrow batch."""
    coords = positions(params, ids, ticks)
    arrays: list[pa.Array] = [pa.array(ids)]
    arrays += [pa.array(axis) for axis in coords]
    arrays += [
        pa.array(kinds(params, ids)),
        pa.array(ticks),
        pa.array(params.start_time + ticks / params.rate),
    ]
    names = ["id", *AXES[: params.dims], "kind", "tick", "ts"]
    return pa.RecordBatch.from_arrays(arrays, names=names)


class SimulationStreamReader(DataSourceStreamReader):
    """Offsets are ticks; a micro-batch reads ticks ``(start, end]`` split by agent ranges."""

    def __init__(self, params: SimulationParams) -> None:
        self.params = params
        self._admission: TickAdmission | None = None

    def initialOffset(self) -> dict[str, int]:
        return {"tick": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        # Admission control in Spark's own terms: at most max_ticks_per_batch ticks of rows.
        return ReadMaxRows(self.params.max_ticks_per_batch * self._rows_per_tick())

    def _rows_per_tick(self) -> int:
        return -(-self.params.agents // self.params.period)

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        # Never move backwards (a restarted driver resumes at the committed tick) and never run
        # ahead of the wall clock; under a row limit, a catch-up after downtime stays bounded.
        tick = math.floor((time.time() - self.params.start_time) * self.params.rate)
        if self.params.max_ticks:
            tick = min(tick, self.params.max_ticks)
        if isinstance(limit, ReadMaxRows):
            ceiling = max(1, limit.max_rows // self._rows_per_tick())
            if self.params.admission == "latency":
                # Created here, not in __init__: Spark pickles the reader to the process that
                # asks it for offsets, and the durations are that process's clock.
                if self._admission is None:
                    self._admission = TickAdmission(self.params.rate, ceiling)
                tick = self._admission.admit(time.monotonic(), start["tick"], tick)
            else:
                tick = min(tick, start["tick"] + ceiling)
        return {"tick": max(start["tick"], tick)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        bounds = np.linspace(0, self.params.agents, self.params.partitions + 1).astype(int)
        return [
            InputPartition((start["tick"], end["tick"], int(lo), int(hi)))
            for lo, hi in itertools.pairwise(bounds)
            if hi > lo
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        first, last, lo, hi = partition.value
        if self.params.emit == "latest":
            ids, ticks = last_moves(self.params, first, last, lo, hi)
            yield rows_at(self.params, ids, ticks)
            return
        for tick in range(first + 1, last + 1):
            yield tick_rows(self.params, tick, lo, hi)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: rows are recomputed, never buffered."""


class SimulationDataSource(DataSource):
    """``spark.readStream.format("fanout_simulation")`` with :class:`SimulationParams` options."""

    @classmethod
    def name(cls) -> str:
        return "fanout_simulation"

    def schema(self) -> str:
        return SimulationParams.from_options(self.options).schema()

    def streamReader(self, schema: object) -> DataSourceStreamReader:
        return SimulationStreamReader(SimulationParams.from_options(self.options))
