"""Per-relay delivery: a relay applying its batches holds exactly the truth inside its primitives.

The oracle is a brute-force world: every key's true position after each micro-batch. A model relay
applies the batches as ``Batch`` says (drop inside snapshot primitives, upsert, delete, prune
outside coverage); after every micro-batch its rows inside its primitives must equal the truth.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.publisher.delivery import Checkouts, Stamp, build_batches, rows_by_relay, unique_rows
from fanout.views import Box
from fanout.wire.columns import decode_columns

COLUMNS = ["id", "x", "y"]
coords = st.integers(0, 20).map(float)
boxes = st.builds(
    lambda x, y, w, h: Box((x, y), (x + w, y + h)),
    coords,
    coords,
    st.integers(0, 10),
    st.integers(0, 10),
)
moves = st.dictionaries(st.integers(0, 30), st.tuples(coords, coords), max_size=12)
steps = st.lists(
    st.tuples(moves, st.lists(boxes, max_size=2), st.lists(st.integers(0, 5), max_size=2)),
    min_size=1,
    max_size=8,
)


def table(rows: dict[int, tuple[float, float]]) -> pa.Table:
    keys = sorted(rows)
    return pa.table(
        {
            "id": pa.array(keys, pa.int64()),
            "x": pa.array([rows[k][0] for k in keys], pa.float64()),
            "y": pa.array([rows[k][1] for k in keys], pa.float64()),
        }
    )


def inside(
    rows: dict[int, tuple[float, float]], regions: list[Box]
) -> dict[int, tuple[float, float]]:
    return {k: p for k, p in rows.items() if any(bool(b.match([p[0]], [p[1]])[0]) for b in regions)}


@settings(max_examples=150, deadline=None)
@given(steps)
def test_a_relay_applying_its_batches_holds_the_truth_in_its_primitives(script: list) -> None:
    truth: dict[int, tuple[float, float]] = {}
    prims: dict[int, Box] = {}
    held: dict[int, tuple[float, float]] = {}
    checkouts = Checkouts()
    next_prim = 1
    for seq, (changes, acquired, released) in enumerate(script):
        fresh = set()
        for box in acquired:
            prims[next_prim] = box
            fresh.add(next_prim)
            next_prim += 1
        for index in released:
            if index in prims and index not in fresh:
                del prims[index]
        truth.update(changes)
        regions = list(prims.values())
        matched = {1: table(inside(changes, regions))}
        snapshot = {1: table(inside(truth, [prims[p] for p in fresh]))}
        batch = build_batches(
            stamp=Stamp("agents", 1, seq, seq, 0.0),
            key="id",
            columns=COLUMNS,
            relays=frozenset({1}),
            changed=np.array(sorted(changes), dtype=np.int64),
            matched=matched,
            snapshots=snapshot,
            fresh={1: frozenset(fresh)},
            checkouts=checkouts,
        )[1]
        # the model relay: drop inside snapshot primitives, upsert, delete, prune outside coverage
        held = {k: p for k, p in held.items() if not inside({k: p}, [prims[f] for f in fresh])}
        upserts = decode_columns(batch.upserts)
        if batch.upserts.length:
            held.update(
                zip(
                    upserts["id"].tolist(),
                    zip(upserts["x"].tolist(), upserts["y"].tolist(), strict=True),
                    strict=True,
                )
            )
        for key in decode_columns(batch.deletes)["id"].tolist():
            held.pop(key, None)
        held = inside(held, regions)
        assert held == inside(truth, regions)
        assert batch.seq == seq
        assert batch.snapshots == sorted(fresh)


def test_every_relay_gets_a_batch_even_an_empty_one() -> None:
    batches = build_batches(
        stamp=Stamp("agents", 1, 5, 50, 1.0),
        key="id",
        columns=COLUMNS,
        relays=frozenset({1, 2}),
        changed=np.array([1], dtype=np.int64),
        matched={1: table({1: (0.0, 0.0)})},
        snapshots={},
        fresh={},
        checkouts=Checkouts(),
    )
    assert sorted(batches) == [1, 2]
    assert batches[2].upserts.length == 0
    assert (batches[2].seq, batches[2].tick) == (5, 50)


def test_gone_relays_lose_their_checkouts() -> None:
    checkouts = Checkouts()
    checkouts.settle(1, np.array([], dtype=np.int64), np.array([4, 5], dtype=np.int64))
    checkouts.forget_except(frozenset({2}))
    assert checkouts.held(1).tolist() == []


def test_checkouts_hold_string_keys() -> None:
    checkouts = Checkouts()
    paths = np.array(["/cars/c1", "/cars/c2"], dtype=object)
    assert checkouts.settle(1, paths, paths).tolist() == []
    more = np.array(["/cars/c0", "/cars/c2"], dtype=object)
    assert checkouts.settle(1, more, more[:1]).tolist() == ["/cars/c2"]
    assert checkouts.held(1).tolist() == ["/cars/c0", "/cars/c1"]


def test_rows_are_split_by_relay_and_deduplicated() -> None:
    matched = pa.table(
        {
            "_relay": pa.array([2, 1, 2, 2], pa.int32()),
            "_prim": pa.array([1, 1, 2, 1], pa.int64()),
            "id": pa.array([7, 8, 7, 9], pa.int64()),
            "x": [0.0, 1.0, 0.0, 2.0],
            "y": [0.0, 1.0, 0.0, 2.0],
        }
    )
    split = rows_by_relay(matched)
    assert sorted(split) == [1, 2]
    assert split[2].column_names == COLUMNS
    merged = unique_rows([split[2]], "id")
    assert merged is not None
    assert merged.column("id").to_pylist() == [7, 9]
