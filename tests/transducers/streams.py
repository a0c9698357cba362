"""A view's stream for transducer tests: its content at each tick, the pushes a relay would send
for it (``Push``/``NoUpdate``), and what a subscriber holds after applying output pushes.

Plain Python: the oracle side of the property tests (tests/transducers/test_sql.py) reads the
contents, never the code under test.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import strategies as st

from fanout.wire.columns import decode_columns, encode_columns
from fanout.wire.messages import NoUpdate, Push

#: A content: key -> (cell, v).
Content = dict[int, tuple[int, float]]
SCHEMA = pa.schema([("id", pa.int64()), ("cell", pa.int64()), ("v", pa.float64())])
SUB = 7


def contents() -> st.SearchStrategy[list[tuple[Content, bool]]]:
    """Contents at successive ticks, each with whether it is sent as a full push (the first
    always; a later one as after a ``resync``). Contents repeat often (no-updates)."""
    row = st.tuples(st.integers(0, 3), st.integers(-3, 3).map(float))
    content = st.dictionaries(st.integers(0, 7), row, max_size=6)
    tick = st.tuples(content, st.sampled_from([False] * 5 + [True]))
    ticks = st.lists(st.one_of(tick, st.just(None)), min_size=1, max_size=12)
    return ticks.map(_repeat)


def _repeat(ticks: list[tuple[Content, bool] | None]) -> list[tuple[Content, bool]]:
    """None repeats the previous content (the first: an empty one); the first tick is full."""
    out: list[tuple[Content, bool]] = []
    for at, tick in enumerate(ticks):
        content, full = tick if tick is not None else (out[-1][0] if out else {}, False)
        out.append((content, full or at == 0))
    return out


def _rows(content: Content, keys: list[int]) -> Any:
    if not keys:
        return encode_columns({})  # as the relay sends no rows: no columns at all
    return encode_columns(
        {
            "id": np.array(keys, dtype=np.int64),
            "cell": np.array([content[k][0] for k in keys], dtype=np.int64),
            "v": np.array([content[k][1] for k in keys], dtype=np.float64),
        }
    )


def frames(ticks: list[tuple[Content, bool]]) -> list[Push | NoUpdate]:
    """The frames a relay sends for these contents (a no-update when nothing changed)."""
    out: list[Push | NoUpdate] = []
    before: Content = {}
    for seq, (content, full) in enumerate(ticks, 1):
        if full:
            entered, updated, left = sorted(content), [], []
        else:
            entered = sorted(set(content) - set(before))
            updated = sorted(k for k in content if k in before and before[k] != content[k])
            left = sorted(set(before) - set(content))
        if not (full or entered or updated or left):
            out.append(NoUpdate(SUB, 1, seq, 10 * seq))
        else:
            gone = (
                encode_columns({"id": np.array(left, dtype=np.int64)})
                if left
                else encode_columns({})
            )
            out.append(
                Push(
                    SUB,
                    1,
                    seq,
                    10 * seq,
                    float(seq),
                    full,
                    _rows(content, entered),
                    _rows(content, updated),
                    gone,
                )
            )
        before = content
    return out


def apply(held: dict[Any, tuple[Any, ...]], frame: Push | NoUpdate, key: str) -> None:
    """Apply an output frame to what a subscriber holds (key -> row, columns in order)."""
    if isinstance(frame, NoUpdate):
        return
    if frame.full:
        held.clear()
    left = decode_columns(frame.left)
    for gone in left.get(key, np.array([])).tolist():
        del held[gone]
    for payload in (frame.updated, frame.entered):
        columns = decode_columns(payload)
        if not columns:
            continue
        names = list(columns)
        rows = zip(*(_values(columns[name]) for name in names), strict=True)
        for row in rows:
            held[row[names.index(key)]] = row


def _values(column: np.ndarray) -> list[Any]:
    """A decoded column as Python values, None where NULL."""
    values: list[Any] = np.ma.getdata(column).tolist()
    nulls = np.ma.getmaskarray(column).tolist()
    return [None if null else value for value, null in zip(values, nulls, strict=True)]
