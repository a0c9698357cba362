"""SQL row deltas: entered, updated (new digest), left (relay/data/rows.py)."""

from __future__ import annotations

import msgspec
import numpy as np

from fanout.relay.core.transforms import Shape
from fanout.relay.data.engine import Result
from fanout.relay.data.rows import HeldRows, cut_rows
from fanout.views.sql import parse as sql
from fanout.wire.columns import Columns, decode_columns

SHAPE = Shape(("k", "v"))
VIEW = sql("SELECT * FROM t")


def decoded(raw: msgspec.Raw) -> dict[str, np.ndarray]:
    return decode_columns(msgspec.msgpack.decode(raw, type=Columns))


def result(**rows: tuple[float, int]) -> Result:
    keys = np.array(sorted(rows), dtype=object)
    return Result(
        keys,
        np.array([rows[k][1] for k in keys], dtype=np.uint64),
        {"k": keys, "v": np.array([rows[k][0] for k in keys])},
    )


def held(of: Result) -> HeldRows:
    return HeldRows(VIEW, 1, 1, 0, of.keys, digests=of.digests)


def test_the_first_push_is_the_whole_result() -> None:
    body = cut_rows(result(a=(1.0, 7), b=(2.0, 8)), "k", SHAPE, None)
    assert body.full and body.changes == 2


def test_a_push_holds_entered_updated_and_left_rows() -> None:
    first = result(a=(1.0, 7), b=(2.0, 8), c=(3.0, 9))
    body = cut_rows(result(a=(1.0, 7), b=(5.0, 80), d=(4.0, 10)), "k", SHAPE, held(first))
    assert not body.full and body.changes == 3
    entered = decoded(body.entered)
    updated = decoded(body.updated)
    left = decoded(body.left)
    assert (entered["k"].tolist(), entered["v"].tolist()) == (["d"], [4.0])
    assert (updated["k"].tolist(), updated["v"].tolist()) == (["b"], [5.0])
    assert left["k"].tolist() == ["c"]


def test_an_unchanged_result_has_no_changes() -> None:
    same = result(a=(1.0, 7))
    assert cut_rows(same, "k", SHAPE, held(same)).changes == 0


def test_the_precision_of_a_shape_applies() -> None:
    body = cut_rows(result(a=(1.0, 7)), "k", Shape(("k", "v"), "float32"), None)
    assert decoded(body.entered)["v"].dtype == np.float32
