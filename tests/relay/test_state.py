"""The relay's columnar table behaves like a dict of rows, kept sorted by key."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.relay.state import Table

operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("upsert"),
            st.dictionaries(st.integers(-50, 50), st.floats(-1e6, 1e6), max_size=10),
        ),
        st.tuples(st.just("delete"), st.lists(st.integers(-60, 60), max_size=8)),
    ),
    max_size=30,
)


@settings(max_examples=200)
@given(operations)
def test_table_matches_a_dict_oracle(script: list) -> None:
    table = Table("id", {"id": "<i8", "x": "<f8", "name": "str"})
    oracle: dict[int, tuple[float, str]] = {}
    changed: dict[int, int] = {}
    for seq, (op, arg) in enumerate(script):
        if op == "upsert":
            keys = np.array(list(arg), dtype=np.int64)
            xs = np.array(list(arg.values()), dtype=np.float64)
            names = np.array([f"n{k}" for k in arg], dtype=object)
            table.upsert({"id": keys, "x": xs, "name": names}, seq)
            for key, x in arg.items():
                oracle[key] = (x, f"n{key}")
                changed[key] = seq
        else:
            table.delete(np.array(arg, dtype=np.int64))
            for key in arg:
                oracle.pop(key, None)
        assert table.keys.tolist() == sorted(oracle)
        assert table.column("x").tolist() == [oracle[k][0] for k in sorted(oracle)]
        assert table.column("name").tolist() == [oracle[k][1] for k in sorted(oracle)]
        assert table.changed.tolist() == [changed[k] for k in sorted(oracle)]


def test_delete_where_and_take() -> None:
    table = Table("id", {"id": "<i8", "x": "<f8"})
    table.upsert({"id": np.array([3, 1, 2]), "x": np.array([30.0, 10.0, 20.0])}, 0)
    table.delete_where(table.column("x") > 25)
    assert table.take(np.array([1]))["x"].tolist() == [20.0]
    assert len(table) == 2
