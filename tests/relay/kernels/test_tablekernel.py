"""The compiled table writer writes exactly the rows numpy writes
(``relay.kernels.tablekernel``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.data import buffers as state
from fanout.relay.data.buffers import Table
from fanout.relay.kernels.compiled import tablekernel

pytestmark = pytest.mark.skipif(tablekernel is None, reason="built without a C compiler")

COLUMNS = {"id": "<i8", "x": "<f8", "kind": "<i4", "flag": "|b1", "small": "<i2", "tag": "|u1"}


def table(keys: list[int], seed: int) -> Table:
    rng = np.random.default_rng(seed)
    made = Table("id", COLUMNS)
    made.upsert(rows(sorted(keys), rng), seq=1)
    return made


def rows(keys: list[int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    count = len(keys)
    return {
        "id": np.array(keys, dtype=np.int64),
        "x": rng.normal(size=count),
        "kind": rng.integers(-5, 5, count).astype(np.int32),
        "flag": rng.random(count) < 0.5,
        "small": rng.integers(-300, 300, count).astype(np.int16),
        "tag": rng.integers(0, 255, count).astype(np.uint8),
    }


@settings(max_examples=300, deadline=None)
@given(
    held=st.sets(st.integers(-50, 50), max_size=40),
    batch=st.sets(st.integers(-60, 60), max_size=40),
    ordered=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_an_upsert_writes_what_numpy_writes(
    held: set[int], batch: set[int], ordered: bool, seed: int
) -> None:
    keys = sorted(batch)
    if not ordered:
        np.random.default_rng(seed).shuffle(keys)
    incoming = rows(keys, np.random.default_rng(seed + 1))
    fast, slow = table(list(held), seed), table(list(held), seed)
    fast.upsert(incoming, seq=7)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(state, "tablekernel", None)
        slow.upsert(incoming, seq=7)
    assert fast.columns.keys() == slow.columns.keys()
    for name, values in fast.columns.items():
        assert values.dtype == slow.columns[name].dtype
        np.testing.assert_array_equal(values, slow.columns[name], err_msg=name)
    np.testing.assert_array_equal(fast.changed, slow.changed)


def test_overwrite_says_where_each_key_is() -> None:
    assert tablekernel is not None
    held = np.array([2, 4, 6], dtype=np.int64)
    target, changed = np.zeros(3), np.zeros(3, dtype=np.int64)
    at = tablekernel.overwrite(
        held, np.array([6, 1, 4], dtype=np.int64), [target], [np.array([6.0, 1.0, 4.0])], changed, 9
    )
    assert at.tolist() == [2, -1, 1]
    assert target.tolist() == [0.0, 4.0, 6.0] and changed.tolist() == [0, 9, 9]


def test_overwrite_refuses_what_it_cannot_write() -> None:
    assert tablekernel is not None
    held, keys = np.array([1, 2], dtype=np.int64), np.array([1], dtype=np.int64)
    changed = np.zeros(2, dtype=np.int64)

    def refused(targets: list[np.ndarray], sources: list[np.ndarray], match: str, **kw) -> None:
        with pytest.raises(ValueError, match=match):
            tablekernel.overwrite(kw.get("held", held), keys, targets, sources, changed, 1)

    refused([np.zeros(2)], [], "1 target columns but 0")
    refused([np.zeros(2, dtype=object)], [np.zeros(1, dtype=object)], "not contiguous")
    refused([np.zeros(4)[::2]], [np.zeros(1)], "not contiguous")
    refused([np.zeros(3)], [np.zeros(1)], "3 rows, not 2")
    refused([np.zeros(2)], [np.zeros(1, dtype=np.int32)], "items of int32 into float64")
    frozen = np.zeros(2)
    frozen.flags.writeable = False
    refused([frozen], [np.zeros(1)], "read-only")
    refused([np.zeros(2)], [np.zeros(1)], "not sorted", held=np.array([2, 1], dtype=np.int64))


def test_copies_are_equal_and_independent() -> None:
    assert tablekernel is not None
    arrays = [np.arange(5.0), np.arange(3, dtype=np.int16), np.array([True, False]), np.zeros(0)]
    copied = tablekernel.copies(arrays)
    for original, copy in zip(arrays, copied, strict=True):
        assert copy.dtype == original.dtype
        np.testing.assert_array_equal(copy, original)
        assert not np.shares_memory(copy, original)
    with pytest.raises(ValueError, match="not a contiguous array"):
        tablekernel.copies([np.zeros(4)[::2]])
    with pytest.raises(ValueError, match="not a contiguous array"):
        tablekernel.copies([np.zeros(2, dtype=object)])
