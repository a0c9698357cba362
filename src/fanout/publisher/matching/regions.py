"""Matching rows against region primitives (boxes, spheres, sectors, unions) in Spark.

Regions are matched by a cell-bucketed broadcast join plus an exact refine (measured on a 2-core
machine before this code was written: ~200x faster than a nested-loop join): every primitive shape
is exploded into the grid cells its bounding box touches, that small table is broadcast, changed
rows join it on their own cell, and a refine predicate keeps the rows really inside the shape. A
shape touching more than ``MAX_CELLS`` cells (a huge region) is not exploded; the few such shapes
are matched by a broadcast nested-loop join instead, so one huge subscription cannot blow up the
cell table.

Space datasets also take :class:`~fanout.views.entity.Entity` primitives, the row of one key
wherever it is (a relay following an entity for a view relative to it): those rows are paired
by a broadcast equi-join on the key column, next to the shapes' join.

Each step is a small DataFrame -> DataFrame function, tested on batch DataFrames.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyspark.sql.functions as sf
from pyspark.sql import Column, DataFrame, SparkSession

from fanout.errors import InvalidView
from fanout.publisher.datasets import Dataset
from fanout.publisher.matching.base import Prim, PublisherSide
from fanout.publisher.matching.local import LocalTables, local_tables
from fanout.views import View
from fanout.views.entity import Entity
from fanout.views.region import Box, RegionUnion, Sector, Sphere, direction
from fanout.views.region.shapes import SAFE_BIG, SAFE_SMALL, SHRINK, STRETCH, distance_scale

#: Shapes whose bounding box touches more cells than this are matched without bucketing.
MAX_CELLS = 4096
#: Cell indices are clamped to +-this (see ``cell_columns``): 2**62 fits a 64-bit integer.
CELL_LIMIT = 2.0**62

SHAPE_BOX, SHAPE_SPHERE, SHAPE_SECTOR = 0, 1, 2
_AXES = range(3)


@dataclass(frozen=True)
class Shape:
    """One primitive shape of one relay's primitive, flattened to numbers for a Spark table."""

    relay: int
    prim: int
    kind: int
    lo: tuple[float, ...]
    hi: tuple[float, ...]
    center: tuple[float, ...] = (0.0, 0.0, 0.0)
    radius: float = 0.0
    axis: tuple[float, ...] = (0.0, 0.0, 0.0)
    cos_half: float = -1.0
    #: Offsets from the center are multiplied by this for the ball test (``distance_scale``).
    scale: float = 1.0


def shapes_of(relay: int, prim: int, view: Box | Sphere | Sector | RegionUnion) -> list[Shape]:
    """Flatten a region view into its primitive shapes (a union gives one shape per member)."""
    members = view.members if isinstance(view, RegionUnion) else (view,)
    return [_shape(relay, prim, member) for member in members]


def _shape(relay: int, prim: int, view: Box | Sphere | Sector) -> Shape:
    bounds = view.bounds()
    lo, hi = _pad(bounds.lo), _pad(bounds.hi)
    if isinstance(view, Box):
        return Shape(relay, prim, SHAPE_BOX, lo, hi)
    center, scale = _pad(view.center), distance_scale(view.radius)
    if isinstance(view, Sphere):
        return Shape(relay, prim, SHAPE_SPHERE, lo, hi, center, view.radius, scale=scale)
    axis = _pad(direction(view.dims, view.heading))
    cos_half = -1.0 if view.half_angle >= math.pi else math.cos(view.half_angle)
    return Shape(relay, prim, SHAPE_SECTOR, lo, hi, center, view.radius, axis, cos_half, scale)


def _pad(values: Sequence[float]) -> tuple[float, ...]:
    # 2-D shapes get a zero third axis so one table schema serves both dimensions.
    return tuple(values) + (0.0,) * (3 - len(values))


def cell_range(lo: float, hi: float, cell_size: float) -> range:
    """The integer cells ``[floor(lo / size), floor(hi / size)]`` a closed interval touches,
    clamped to ``CELL_LIMIT`` as rows' cells are (``cell_columns``)."""
    return range(_cell(lo / cell_size), _cell(hi / cell_size) + 1)


def _cell(scaled: float) -> int:
    return math.floor(max(min(scaled, CELL_LIMIT), -CELL_LIMIT))


def shape_table(shapes: Iterable[Shape], dims: int, cell_size: float) -> tuple[pa.Table, pa.Table]:
    """Build the broadcast tables: (bucketed shapes with one row per cell, wide shapes).

    Args:
        shapes: every relay's primitive shapes.
        dims: 2 or 3, the dataset's index dimensions.
        cell_size: grid cell side.

    Returns:
        Two Arrow tables with the shape columns (``_relay``, ``_prim``, ``_shape``, ...); the
        first also has ``_cell0 .. _cell{dims-1}``. Dataset columns never start with ``_``.
    """
    bucketed: dict[str, list[float | int]] = {name: [] for name in _shape_columns(dims)}
    wide: dict[str, list[float | int]] = {name: [] for name in _shape_columns(0)}
    for shape in shapes:
        ranges = [cell_range(shape.lo[a], shape.hi[a], cell_size) for a in range(dims)]
        # Counted with Python integers: ``len`` of a huge region's range is beyond a C one.
        if math.prod(r.stop - r.start for r in ranges) > MAX_CELLS:
            _append(wide, shape, ())
            continue
        for cell in itertools.product(*ranges):
            _append(bucketed, shape, cell)
    return pa.table(bucketed, schema=_schema(dims)), pa.table(wide, schema=_schema(0))


def _shape_columns(dims: int) -> list[str]:
    columns = ["_relay", "_prim", "_shape"]
    columns += [f"_lo{a}" for a in _AXES] + [f"_hi{a}" for a in _AXES]
    columns += [f"_c{a}" for a in _AXES] + ["_radius"] + [f"_d{a}" for a in _AXES] + ["_cos_half"]
    columns.append("_scale")
    return columns + [f"_cell{a}" for a in range(dims)]


def _schema(dims: int) -> pa.Schema:
    types = {"_relay": pa.int32(), "_prim": pa.int64(), "_shape": pa.int8()}
    types |= {f"_cell{a}": pa.int64() for a in range(dims)}
    return pa.schema([(name, types.get(name, pa.float64())) for name in _shape_columns(dims)])


def _append(table: dict[str, list[float | int]], shape: Shape, cell: tuple[int, ...]) -> None:
    table["_relay"].append(shape.relay)
    table["_prim"].append(shape.prim)
    table["_shape"].append(shape.kind)
    for a in _AXES:
        table[f"_lo{a}"].append(shape.lo[a])
        table[f"_hi{a}"].append(shape.hi[a])
        table[f"_c{a}"].append(shape.center[a])
        table[f"_d{a}"].append(shape.axis[a])
    table["_radius"].append(shape.radius)
    table["_cos_half"].append(shape.cos_half)
    table["_scale"].append(shape.scale)
    for a, index in enumerate(cell):
        table[f"_cell{a}"].append(index)


def with_cells(rows: DataFrame, index_columns: Sequence[str], cell_size: float) -> DataFrame:
    """Add each row's grid cell ``_cell0 .. _cellN`` from its index columns."""
    return rows.withColumns(cell_columns(index_columns, cell_size))


def cell_columns(index_columns: Sequence[str], cell_size: float) -> dict[str, Column]:
    """The expressions of the grid cell columns ``_cell0 .. _cellN``.

    A coordinate divided by the cell size is clamped to ``CELL_LIMIT`` before ``floor``: a
    huge, infinite or NaN one would overflow its 64-bit result, an error that fails the
    micro-batch under ANSI SQL (Spark 4's default). Such rows share the extreme cells, where
    only huge shapes reach — and those are matched without cells anyway (``MAX_CELLS``).
    """
    limit_low, limit_high = sf.lit(-CELL_LIMIT), sf.lit(CELL_LIMIT)
    return {
        f"_cell{a}": sf.floor(
            sf.least(sf.greatest(sf.col(name) / sf.lit(cell_size), limit_low), limit_high)
        )
        for a, name in enumerate(index_columns)
    }


def inside(index_columns: Sequence[str]) -> Column:
    """The exact refine: is the row's point inside the joined shape (boundary included)?

    Uses the same formulas as the region views' numpy ``match`` so both sides agree.
    """
    point = [sf.col(name) for name in index_columns]
    in_box = _all((p >= sf.col(f"_lo{a}")) & (p <= sf.col(f"_hi{a}")) for a, p in enumerate(point))
    offsets = [p - sf.col(f"_c{a}") for a, p in enumerate(point)]
    # The ball and the angle test on scaled offsets, as ``Sphere.match`` and ``Sector.match``.
    ball = [offset * sf.col("_scale") for offset in offsets]
    reach = sf.col("_radius") * sf.col("_scale")
    within = _sum(offset * offset for offset in ball) <= reach * reach
    largest = sf.greatest(*(sf.abs(offset) for offset in offsets))  # 2 or 3 axes
    cone_scale = (
        sf.when(largest > sf.lit(SAFE_BIG), sf.lit(SHRINK))
        .when(largest < sf.lit(SAFE_SMALL), sf.lit(STRETCH))
        .otherwise(sf.lit(1.0))
    )
    cone = [offset * cone_scale for offset in offsets]
    along = _sum(offset * sf.col(f"_d{a}") for a, offset in enumerate(cone))
    squared = _sum(offset * offset for offset in cone)
    in_cone = (sf.col("_cos_half") <= -1.0) | (along >= sf.sqrt(squared) * sf.col("_cos_half"))
    return in_box & (
        (sf.col("_shape") == SHAPE_BOX)
        | ((sf.col("_shape") == SHAPE_SPHERE) & within)
        | ((sf.col("_shape") == SHAPE_SECTOR) & within & in_cone)
    )


def _all(columns: Iterable[Column]) -> Column:
    result: Column | None = None
    for column in columns:
        result = column if result is None else result & column
    assert result is not None, "at least one index column"
    return result


def _sum(columns: Iterable[Column]) -> Column:
    result: Column | None = None
    for column in columns:
        result = column if result is None else result + column
    assert result is not None, "at least one index column"
    return result


@dataclass(frozen=True)
class JoinPlan:
    """The pieces of the matching join that do not depend on the rows matched.

    Building them takes hundreds of Py4J calls (each ``sf.col``, each operator), about 0.2 s a
    micro-batch on the 2-core reference machine; they are built once per shape tables and
    index columns and reused by every micro-batch until the primitives change.
    """

    cells: dict[str, Column]
    bucketed: DataFrame
    wide: DataFrame
    condition: Column
    inside: Column

    @classmethod
    def build(cls, frames: ShapeFrames, index_columns: Sequence[str], cell_size: float) -> JoinPlan:
        """Prepare the join of rows indexed by ``index_columns`` with ``frames``."""
        cells = cell_columns(index_columns, cell_size)
        refine = inside(index_columns)
        return cls(
            cells=cells,
            bucketed=sf.broadcast(frames.bucketed).alias("shape"),
            wide=sf.broadcast(frames.wide),
            condition=_same_cells(list(cells)) & refine,
            inside=refine,
        )


@dataclass(frozen=True)
class ShapeFrames:
    """The broadcast shape tables as Spark DataFrames (built once per primitive change)."""

    bucketed: DataFrame
    wide: DataFrame
    has_wide: bool
    #: ``_relay, _prim, _key`` of entity primitives, and the dataset's key column (or None).
    keyed: DataFrame | None = None
    key: str | None = None
    _plans: dict[tuple[tuple[str, ...], float], JoinPlan] = field(
        default_factory=dict, compare=False, repr=False
    )

    def plan(self, index_columns: Sequence[str], cell_size: float) -> JoinPlan:
        """The join pieces for rows indexed by ``index_columns`` (built on first use)."""
        key = (tuple(index_columns), cell_size)
        if key not in self._plans:
            self._plans[key] = JoinPlan.build(self, index_columns, cell_size)
        return self._plans[key]

    @classmethod
    def build(
        cls,
        spark: SparkSession,
        shapes: Iterable[Shape],
        dims: int,
        cell_size: float,
        *,
        entities: Sequence[tuple[int, int, int | str]] = (),
        key: str | None = None,
    ) -> ShapeFrames:
        """Turn shapes (and ``(relay, prim, key)`` of entity primitives) into DataFrames.

        They are local relations, not cached: Spark's optimiser then folds the join's filters
        into them and broadcasts them straight from the driver, where a cached table costs a
        job to scan it every micro-batch (``bench/microbatch.py``: about 0.1-0.3 s of a 1,000-row
        micro-batch on the 2-core reference machine).

        Raises:
            ValueError: entities without the ``key`` column to match them on.
        """
        bucketed, wide = shape_table(shapes, dims, cell_size)
        keyed = None
        if entities:
            if key is None:
                raise ValueError("entity primitives need the dataset's key column")
            keyed = spark.createDataFrame(entity_table(entities))
        return cls(
            bucketed=spark.createDataFrame(bucketed),
            wide=spark.createDataFrame(wide),
            has_wide=wide.num_rows > 0,
            keyed=keyed,
            key=key,
        )

    def unpersist(self) -> None:
        """Release the tables (a no-op for the local relations ``build`` makes, but tables
        built otherwise may be cached)."""
        self.bucketed.unpersist()
        self.wide.unpersist()
        if self.keyed is not None:
            self.keyed.unpersist()


def entity_table(entities: Sequence[tuple[int, int, int | str]]) -> pa.Table:
    """``_relay, _prim, _key`` of entity primitives (all keys of one type: the dataset's)."""
    keys = [key for _, _, key in entities]
    return pa.table(
        {
            "_relay": pa.array([relay for relay, _, _ in entities], pa.int32()),
            "_prim": pa.array([prim for _, prim, _ in entities], pa.int64()),
            "_key": pa.array(keys, pa.string() if isinstance(keys[0], str) else pa.int64()),
        }
    )


def match(
    rows: DataFrame,
    shapes: ShapeFrames,
    index_columns: Sequence[str],
    cell_size: float,
    keep_unmatched: bool = False,
) -> DataFrame:
    """Pair rows with the relays whose primitives hold them: ``_relay, _prim`` + the row's columns.

    A row inside several shapes of one relay appears once per shape; delivery deduplicates. With
    ``keep_unmatched`` every row appears at least once (a row without a bucketed match also with a
    null ``_relay``), so one Spark job yields both the matches and every changed key.
    """
    columns = rows.columns
    plan = shapes.plan(index_columns, cell_size)
    joined = (
        rows.withColumns(plan.cells)
        .alias("row")
        .join(
            plan.bucketed,
            on=plan.condition,
            how="left" if keep_unmatched else "inner",
        )
    )
    matched = joined.select("_relay", "_prim", *(f"row.{c}" for c in columns))
    if shapes.has_wide:
        wide = rows.crossJoin(plan.wide).where(plan.inside).select("_relay", "_prim", *columns)
        matched = matched.unionByName(wide)
    if shapes.keyed is not None and shapes.key is not None:
        keyed = (
            rows.alias("row")
            .join(sf.broadcast(shapes.keyed), sf.col(f"row.{shapes.key}") == sf.col("_key"))
            .select("_relay", "_prim", *(f"row.{c}" for c in columns))
        )
        matched = matched.unionByName(keyed)
    return matched


def _same_cells(cells: Sequence[str]) -> Column:
    return _all(sf.col(f"row.{c}") == sf.col(f"shape.{c}") for c in cells)


Region = Box | Sphere | Sector | RegionUnion


@dataclass(frozen=True)
class RegionMatcher:
    """The matcher of ``space`` datasets."""

    index_columns: tuple[str, ...]
    cell_size: float
    #: The key column and whether keys are strings (for entity primitives; None: not taken).
    key: str | None = None
    string_keys: bool = False

    def check(self, view: View) -> View:
        """Accept absolute regions of the dataset's dimensions, and entities of its key's type.

        Raises:
            InvalidView: not an absolute region or entity, of the wrong dimensions, or an
                entity key of the wrong type.
        """
        if isinstance(view, Entity) and self.key is not None:
            if isinstance(view.key, str) != self.string_keys:
                kind = "a string" if self.string_keys else "an integer"
                raise InvalidView(f"{view}: keys of this dataset are {kind}")
            return view
        if not isinstance(view, Box | Sphere | Sector | RegionUnion):
            raise InvalidView(
                f"this dataset takes absolute region views (box, sphere, sector, union), not"
                f" {type(view).__name__}"
            )
        if view.dims != len(self.index_columns):
            raise InvalidView(
                f"this dataset is {len(self.index_columns)}-D; the view is {view.dims}-D"
            )
        return view

    def tables(self, spark: SparkSession, prims: Iterable[Prim]) -> ShapeFrames | None:
        """Explode every region primitive into shapes and cells (see ``shape_table``)."""
        shapes: list[Shape] = []
        entities: list[tuple[int, int, int | str]] = []
        for relay, prim, view in prims:
            if isinstance(view, Entity):
                entities.append((relay, prim, view.key))
            else:
                shapes.extend(shapes_of(relay, prim, _region(view)))
        if not shapes and not entities:
            return None
        dims = len(self.index_columns)
        return ShapeFrames.build(
            spark, shapes, dims, self.cell_size, entities=entities, key=self.key
        )

    def change_tables(self, spark: SparkSession, prims: Iterable[Prim]) -> LocalTables | None:
        """Tables matching a micro-batch's changed rows in the driver (``matching.local``)."""
        return local_tables(prims)

    def match(
        self, rows: DataFrame, tables: ShapeFrames, keep_unmatched: bool = False
    ) -> DataFrame:
        """See ``match``."""
        return match(rows, tables, self.index_columns, self.cell_size, keep_unmatched)


def _region(view: View) -> Region:
    if not isinstance(view, Box | Sphere | Sector | RegionUnion):
        raise InvalidView(f"expected a region view, got {type(view).__name__}")
    return view


def region_matcher(dataset: Dataset) -> RegionMatcher:
    """The matcher of a ``space`` dataset: its coordinates, cells and key."""
    string_keys = dataset.schema[dataset.key] == "string"
    return RegionMatcher(dataset.index_columns, dataset.cell_size, dataset.key, string_keys)


SIDE = PublisherSide(region_matcher)
"""Index ``space`` at the publisher."""
