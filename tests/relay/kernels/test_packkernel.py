"""The compiled packer's bytes are msgspec's (oracle: ``pushes.encode_range``, run by run)."""

from __future__ import annotations

import itertools

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.data import pushes
from fanout.relay.data.pushes import NO_ROWS, encode_range, encode_runs, prepare_rows
from fanout.relay.kernels import compiled
from fanout.wire.columns import NUMERIC_DTYPES, Columns, decode_columns

pytestmark = pytest.mark.skipif(not compiled.COMPILED, reason="kernels not built")

DTYPES = sorted(NUMERIC_DTYPES)


def oracle(
    rows: dict[str, np.ndarray], positions: np.ndarray | None, bounds: np.ndarray
) -> list[bytes]:
    """Each run encoded by ``encode_range`` (empty runs: ``NO_ROWS``)."""
    if positions is not None:
        rows = {name: values.take(positions) for name, values in rows.items()}
    prepared = prepare_rows(rows)
    edges = bounds.tolist()
    return [
        bytes(encode_range(prepared, a, b)) if b > a else bytes(NO_ROWS)
        for a, b in itertools.pairwise(edges)
    ]


def packed(
    rows: dict[str, np.ndarray], positions: np.ndarray | None, bounds: np.ndarray
) -> list[bytes]:
    """``encode_runs``' bytes (through the compiled packer unless it is switched off)."""
    return [bytes(raw) for raw in encode_runs(rows, positions, bounds, NO_ROWS)]


def random_rows(rng: np.random.Generator, length: int, width: int) -> dict[str, np.ndarray]:
    rows = {}
    for c in range(width):
        dtype = np.dtype(DTYPES[int(rng.integers(len(DTYPES)))])
        raw = rng.integers(0, 256, length * dtype.itemsize, dtype=np.uint8)
        name = "c" * int(rng.integers(1, 40)) + str(c)  # fixstr and str 8 names
        rows[name] = raw.view(dtype)
    return rows


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    length=st.integers(0, 300),
    width=st.integers(0, 18),  # 16 and more: an array 16 header
    runs=st.integers(0, 12),
    gathered=st.booleans(),
)
def test_packed_runs_are_msgspec_bytes(
    seed: int, length: int, width: int, runs: int, gathered: bool
) -> None:
    rng = np.random.default_rng(seed)
    rows = random_rows(rng, length, width)
    if gathered:
        positions = rng.integers(0, max(length, 1), int(rng.integers(0, 400)) if length else 0)
        positions = positions.astype(np.intp)
        total = len(positions)
    else:
        positions, total = None, length if width else 0
    bounds = np.sort(rng.integers(0, total + 1, runs + 1)).astype(np.int64)
    if runs == 0:
        bounds = bounds[:1]
    assert packed(rows, positions, bounds) == oracle(rows, positions, bounds)


@pytest.mark.parametrize("n", [127, 128, 255, 256, 8191, 8192, 65535, 65536, 70000])
def test_lengths_at_the_msgpack_header_limits(n: int) -> None:
    # the row count's integer and each column's bin header change form at these sizes
    rows = {"id": np.arange(n, dtype=np.int64), "k": np.arange(n, dtype=np.uint8)}
    bounds = np.array([0, n], dtype=np.int64)
    got = packed(rows, None, bounds)
    assert got == oracle(rows, None, bounds)
    decoded = decode_columns(msgspec.msgpack.decode(got[0], type=Columns))
    np.testing.assert_array_equal(decoded["id"], rows["id"])


def test_a_gather_reads_the_rows_at_the_positions() -> None:
    rows = {"id": np.array([10, 11, 12, 13], dtype=np.int64), "x": np.arange(4.0)}
    positions = np.array([3, 0, 2, 2], dtype=np.intp)
    bounds = np.array([0, 1, 1, 4], dtype=np.int64)
    runs = encode_runs(rows, positions, bounds, NO_ROWS)
    assert runs[1] is NO_ROWS
    first = decode_columns(msgspec.msgpack.decode(runs[0], type=Columns))
    third = decode_columns(msgspec.msgpack.decode(runs[2], type=Columns))
    assert first["id"].tolist() == [13] and third["id"].tolist() == [10, 12, 12]
    assert third["x"].tolist() == [0.0, 2.0, 2.0]


def test_string_columns_are_encoded_by_msgspec() -> None:
    rows = {"id": np.array([1, 2], dtype=np.int64), "name": np.array(["a", None], dtype=object)}
    bounds = np.array([0, 2], dtype=np.int64)
    assert packed(rows, None, bounds) == oracle(rows, None, bounds)


def test_without_the_packer_runs_are_encoded_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    rows = random_rows(rng, 50, 4)
    positions = rng.integers(0, 50, 80).astype(np.intp)
    bounds = np.array([0, 10, 10, 80], dtype=np.int64)
    expected = packed(rows, positions, bounds)
    monkeypatch.setattr(pushes, "packkernel", None)
    assert [bytes(r) for r in encode_runs(rows, positions, bounds, NO_ROWS)] == expected


def test_bad_runs_and_positions_are_refused() -> None:
    kernel = compiled.packkernel
    assert kernel is not None
    prefix = [pushes._prefix("id", "<i8")]
    column = [np.arange(4, dtype=np.int64)]

    def pack(positions: np.ndarray | None, bounds: list[int]) -> object:
        return kernel.pack_runs(
            prefix, column, positions, np.array(bounds, dtype=np.int64), NO_ROWS, msgspec.Raw
        )

    with pytest.raises(ValueError, match="not a run"):
        pack(None, [2, 1])
    with pytest.raises(ValueError, match="past a column"):
        pack(None, [0, 5])
    with pytest.raises(ValueError, match="past the positions"):
        pack(np.array([0, 1], dtype=np.intp), [0, 3])
    with pytest.raises(IndexError, match="position 4"):
        pack(np.array([0, 4], dtype=np.intp), [0, 2])
    with pytest.raises(IndexError, match="position -1"):
        pack(np.array([-1], dtype=np.intp), [0, 1])
    with pytest.raises(ValueError, match="contiguous"):
        kernel.pack_runs(prefix, [np.arange(8)[::2]], None, np.array([0, 1]), NO_ROWS, msgspec.Raw)
    with pytest.raises(ValueError, match="prefixes"):
        kernel.pack_runs([], column, None, np.array([0, 1]), NO_ROWS, msgspec.Raw)
