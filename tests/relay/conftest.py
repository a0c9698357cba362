"""Helpers the relay's tests share."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from fanout.relay.data.buffers import Table
from fanout.wire.messages import DatasetInfo


def _table(info: DatasetInfo, **columns: list[object]) -> Table:
    rows = Table(info.key, info.columns)
    arrays = {
        name: np.array(values, dtype=object if info.columns[name] == "str" else None)
        for name, values in columns.items()
    }
    rows.upsert(arrays, 0)
    return rows


@pytest.fixture(scope="session")
def table() -> Callable[..., Table]:
    """``table(info, column=[values, ...], ...)``: a relay table holding those rows at seq 0."""
    return _table
