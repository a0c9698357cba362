"""Datasets the publisher serves: named, keyed tables with a schema, an index and a source.

The built-in ``agents`` dataset is the demo's simulation; issue 3 adds datasets declared in
``fanout.toml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fanout.publisher.sources.simulation import AXES, SimulationParams
from fanout.wire.messages import DatasetInfo, IndexKind


@dataclass(frozen=True)
class Dataset:
    """One dataset of the publisher.

    Attributes:
        name: what subscribers call it.
        key: the key column (int64).
        columns: column -> numpy dtype string, key included.
        index: the view language rows are selected with.
        index_columns: the columns that language reads (``x, y[, z]`` for ``space``).
        order: the column whose larger value is the newer version of a row.
        simulation: parameters of the simulation source feeding it.
        cell_size: grid cell side for region matching (see ``publisher.matching``).
    """

    name: str
    key: str
    columns: dict[str, str]
    index: IndexKind
    index_columns: tuple[str, ...]
    order: str
    simulation: SimulationParams = field(default_factory=SimulationParams)
    cell_size: float = 50.0

    def info(self) -> DatasetInfo:
        """The descriptor relays receive in the ``Catalog``."""
        return DatasetInfo(
            name=self.name,
            key=self.key,
            columns=dict(self.columns),
            index=self.index,
            index_columns=list(self.index_columns),
        )

    @property
    def value_columns(self) -> list[str]:
        """Every column but the key, in schema order."""
        return [name for name in self.columns if name != self.key]


def agents(params: SimulationParams, cell_size: float | None = None) -> Dataset:
    """The built-in ``agents`` dataset: simulated agents moving in 2-D or 3-D."""
    axes = AXES[: params.dims]
    columns = {
        "id": "<i8",
        **dict.fromkeys(axes, "<f8"),
        "kind": "<i4",
        "tick": "<i8",
        "ts": "<f8",
    }
    return Dataset(
        name="agents",
        key="id",
        columns=columns,
        index="space",
        index_columns=axes,
        order="tick",
        simulation=params,
        cell_size=cell_size if cell_size is not None else params.world / 20.0,
    )
