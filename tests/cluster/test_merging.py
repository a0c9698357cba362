"""One batch from the pieces of a seq (``cluster.merging``), against brute force.

The oracle is the promise: every piece describes the same state at the seq for its part, so
after the batch a key is held iff some piece upserts it, or it was held and no piece deletes
it; an upserted key holds its value at the seq. Pieces are drawn from a random state at the
seq (overlapping parts, deletes of keys gone and of keys that only left a part), encoded as
the wire encodes them, merged, decoded, and applied to a random earlier state.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.cluster.merging import merge_pieces
from fanout.wire.columns import Columns, decode_columns, encode_columns
from fanout.wire.messages import Batch

keys = st.integers(0, 30)
values = st.one_of(st.none(), st.floats(allow_nan=False, width=64))
labels = st.one_of(st.none(), st.text(max_size=3))


def encode(rows: dict[int, tuple[float | None, str | None]]) -> Columns:
    if not rows:
        return Columns()
    ordered = sorted(rows.items())
    xs = [v[0] for _, v in ordered]
    x = np.ma.MaskedArray([0.0 if v is None else v for v in xs], mask=[v is None for v in xs])
    return encode_columns(
        {
            "id": np.asarray([k for k, _ in ordered], dtype="<i8"),
            "x": x,
            "label": np.asarray([v[1] for _, v in ordered], dtype=object),
        }
    )


def piece(rows, deletes, snapshots=()) -> Batch:
    return Batch(
        "d",
        1,
        7,
        70,
        70.5,
        upserts=encode(rows),
        deletes=encode_columns({"id": np.asarray(sorted(deletes), dtype="<i8")})
        if deletes
        else Columns(),
        snapshots=list(snapshots),
    )


@st.composite
def seqs(draw: st.DrawFn):
    state = draw(st.dictionaries(keys, st.tuples(values, labels), max_size=20))
    gone = draw(st.sets(keys.filter(lambda k: k not in state), max_size=5))
    count = draw(st.integers(1, 4))
    pieces = []
    for number in range(count):
        part = (
            draw(st.sets(st.sampled_from(sorted(state)), max_size=len(state))) if state else set()
        )
        left = draw(st.sets(st.sampled_from(sorted(state)), max_size=3)) if state else set()
        deletes = (draw(st.sets(st.sampled_from(sorted(gone)), max_size=3)) if gone else set()) | (
            left - part
        )
        prims = draw(st.sets(st.integers(number * 10, number * 10 + 3), max_size=2))
        pieces.append(piece({k: state[k] for k in part}, deletes, prims))
    before = draw(st.dictionaries(keys, st.tuples(values, labels), max_size=20))
    return state, pieces, before


def rows_of(payload: Columns) -> dict[int, tuple[float | None, str | None]]:
    if not payload.length:
        return {}
    arrays = decode_columns(payload)
    return {
        int(k): (x, label)
        for k, x, label in zip(
            arrays["id"].tolist(), arrays["x"].tolist(), arrays["label"].tolist(), strict=True
        )
    }


@given(seqs())
def test_the_merged_batch_leaves_what_the_pieces_promise(drawn) -> None:
    state, pieces, before = drawn
    merged = merge_pieces(pieces, "id")
    upserted = rows_of(merged.upserts)
    deleted = set(decode_columns(merged.deletes)["id"].tolist()) if merged.deletes.length else set()
    # applied as the relay applies a batch (relay.intake): upserts, then deletes
    after = {k: v for k, v in (before | upserted).items() if k not in deleted}
    # brute force: held iff some piece upserts it, or held before and no piece deletes it
    in_pieces = {k for p in pieces for k in rows_of(p.upserts)}
    deletes = {
        k for p in pieces if p.deletes.length for k in decode_columns(p.deletes)["id"].tolist()
    }
    expected = {k: state[k] for k in in_pieces} | {
        k: v for k, v in before.items() if k not in in_pieces and k not in deletes
    }
    assert after == expected
    assert len(upserted) == merged.upserts.length, "each key once"
    assert merged.snapshots == list(dict.fromkeys(s for p in pieces for s in p.snapshots))
    assert (merged.epoch, merged.seq, merged.tick) == (1, 7, 70)


def test_pieces_of_different_seqs_are_not_merged() -> None:
    later = Batch("d", 1, 8, 80, 80.0, upserts=Columns(), deletes=Columns())
    with pytest.raises(ValueError, match="cannot be merged"):
        merge_pieces([piece({}, set()), later], "id")
