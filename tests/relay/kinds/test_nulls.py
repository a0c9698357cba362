"""NULL in every column, random SQL views, a relay (sans I/O, DuckDB inside) fed as a publisher
feeds it: every view's rows at every push are DuckDB's answer to the view on the publisher's rows
at that tick (``fanout.testing.audit.duckdb_answer``, an oracle that shares nothing with the
relay but DuckDB itself). Issue 29, item 4."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import UPSTREAM, RelayCore, Send
from fanout.testing.audit import duckdb_answer, same_rows
from fanout.testing.batches import batch
from fanout.testing.relaycore import ready_core
from fanout.views.sql import parse as sql
from fanout.wire.columns import decode_columns, to_python
from fanout.wire.messages import (
    Acquire,
    DatasetInfo,
    Error,
    Push,
    Release,
    Subscribe,
    Subscribed,
)

T = DatasetInfo(
    "t",
    "id",
    {"id": "<i8", "a": "<i8", "b": "<f8", "s": "str", "f": "|b1", "x": "bytes"},
    "sql",
    ["id", "a", "b", "s", "f", "x"],
    nullable=["a", "b", "s", "f", "x"],
)
U = DatasetInfo(
    "u", "k", {"k": "<i8", "a": "<i8", "w": "str"}, "sql", ["k", "a", "w"], nullable=["a", "w"]
)
INFOS = {"t": T, "u": U}
VALUES = {
    "a": st.none() | st.integers(-2, 3),
    "b": st.none() | st.sampled_from([float("nan"), -1.5, 0.0, 2.5]),
    "s": st.none() | st.sampled_from(["x", "xy", "y"]),
    "f": st.none() | st.booleans(),
    "w": st.none() | st.sampled_from(["p", "q"]),
    "x": st.none() | st.sampled_from([b"", b"\x00", b"a", b"a\x00", b"\xff", b"ab"]),
}


def atoms() -> st.SearchStrategy[str]:
    number = st.integers(-2, 3).map(str)
    real = st.sampled_from(["-1.5", "0", "1", "2.5"])
    return st.one_of(
        st.tuples(st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), number).map(
            lambda p: f"a {p[0]} {p[1]}"
        ),
        st.tuples(st.sampled_from(["<", ">=", "="]), real).map(lambda p: f"b {p[0]} {p[1]}"),
        st.sampled_from(["a", "b", "s", "f", "x"]).flatmap(
            lambda c: st.sampled_from([f"{c} IS NULL", f"{c} IS NOT NULL"])
        ),
        st.tuples(number, number).map(lambda p: f"a IN ({p[0]}, {p[1]})"),
        number.map(lambda n: f"a IN ({n}, NULL)"),
        st.tuples(number, number).map(lambda p: f"a NOT IN ({p[0]}, {p[1]})"),
        st.tuples(real, real).map(lambda p: f"b BETWEEN {p[0]} AND {p[1]}"),
        st.sampled_from(["s LIKE 'x%'", "s = 'y'", "s <> 'x'", "f", "NOT f", "f = false"]),
        number.map(lambda n: f"a IS DISTINCT FROM {n}"),
        number.map(lambda n: f"COALESCE(a, 0) > {n}"),
        # bytes: the coverage algebra does not bound them; the relay evaluates them
        st.sampled_from(["'\\x00'::BLOB", "'a'::BLOB", "'ab'", "'\\xFF'::BLOB"]).map(
            lambda blob: f"x = {blob}"
        ),
        st.integers(0, 2).map(lambda n: f"length(x) > {n}"),
        st.sampled_from(["x < 'b'", "x IN ('a', 'ab')", "octet_length(x) = 1"]),
    )


PREDICATES = st.recursive(
    atoms(),
    lambda inner: st.one_of(
        inner.map(lambda p: f"NOT ({p})"),
        st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(
            lambda p: f"({p[0]}) {p[1]} ({p[2]})"
        ),
    ),
    max_leaves=4,
)
ROWS_T = st.dictionaries(
    st.integers(0, 7), st.fixed_dictionaries({c: VALUES[c] for c in "absfx"}), max_size=6
)
ROWS_U = st.dictionaries(
    st.integers(0, 4), st.fixed_dictionaries({c: VALUES[c] for c in "aw"}), max_size=4
)
CHANGES = st.lists(
    st.tuples(ROWS_T, st.sets(st.integers(0, 7), max_size=2), ROWS_U), min_size=1, max_size=5
)


def column(values: list[Any], dtype: str) -> np.ndarray:
    """Values with None as a column of ``dtype`` (masked where None; strings, bytes: None)."""
    if dtype in ("str", "bytes"):
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    nulls = [v is None for v in values]
    data = np.array([0 if v is None else v for v in values], dtype=dtype)
    return np.ma.MaskedArray(data, mask=nulls)


def columns_of(info: DatasetInfo, rows: dict[int, dict[str, Any]]) -> dict[str, np.ndarray]:
    keys = sorted(rows)
    return {
        name: column([k if name == info.key else rows[k][name] for k in keys], dtype)
        for name, dtype in info.columns.items()
    }


def oracle_table(info: DatasetInfo, rows: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The rows as the oracle's table: bytes columns typed BLOB even when all NULL."""
    columns: dict[str, Any] = columns_of(info, rows)
    for name, dtype in info.columns.items():
        if dtype == "bytes":
            columns[name] = pa.array(columns[name].tolist(), type=pa.binary())
    return columns


class Publisher:
    """The publisher's side, as the real one behaves: each relay gets the rows inside the
    primitives it holds (matched by the views' own ``match``, the publisher's mirror's), a
    new primitive's snapshot, and deletes for rows it was sent that left or were deleted."""

    def __init__(self, core: RelayCore) -> None:
        self.core = core
        self.rows: dict[str, dict[int, dict[str, Any]]] = {"t": {}, "u": {}}
        self.held: dict[int, Acquire] = {}
        self.fresh: dict[str, list[int]] = {"t": [], "u": []}
        self.sent: dict[str, set[int]] = {"t": set(), "u": set()}
        self.seq: dict[str, int] = {"t": -1, "u": -1}
        self.tick = 0
        self.out: list[object] = []

    def take(self, sends: list[Send]) -> None:
        for send in sends:
            frame = send.message()
            if send.to != UPSTREAM:
                self.out.append(frame)
            elif isinstance(frame, Acquire):
                self.held[frame.prim] = frame
                self.fresh[frame.dataset].append(frame.prim)
            elif isinstance(frame, Release):
                self.held.pop(frame.prim, None)

    def change(self, dataset: str, upserts: dict[int, dict[str, Any]], deletes: set[int]) -> None:
        """Apply a change to the state and send the relay its batch."""
        info = INFOS[dataset]
        table = self.rows[dataset]
        table.update(upserts)
        for key in deletes:
            table.pop(key, None)
        every = columns_of(info, table)
        keys = np.array(sorted(table), dtype=np.int64)
        inside = np.zeros(len(keys), dtype=bool)
        for acquire in self.held.values():
            if acquire.dataset == dataset and len(keys):
                inside |= np.asarray(acquire.view.match(every), dtype=bool)  # type: ignore[union-attr]
        fresh, self.fresh[dataset] = self.fresh[dataset], []
        changed = np.isin(keys, list(upserts)) | bool(fresh)
        send = keys[inside & changed]
        now_inside = set(keys[inside].tolist())
        gone = sorted(k for k in self.sent[dataset] if k not in now_inside)
        self.sent[dataset] = (self.sent[dataset] - set(gone)) | set(send.tolist())
        self.seq[dataset] += 1
        self.tick += 1
        rows = {k: table[k] for k in send.tolist()}
        frame = batch(
            self.seq[dataset],
            columns_of(info, rows) if rows else None,
            gone,
            dataset=dataset,
            key=info.key,
            tick=self.tick,
            snapshots=fresh,
        )
        self.take(self.core.on_batch(frame))

    def idle(self, dataset: str) -> None:
        """Send the fresh primitives' snapshots as the publisher does when no micro-batch
        comes: in a batch stamped with the last seq and tick, with no change."""
        info = INFOS[dataset]
        table = self.rows[dataset]
        every = columns_of(info, table)
        keys = np.array(sorted(table), dtype=np.int64)
        inside = np.zeros(len(keys), dtype=bool)
        fresh, self.fresh[dataset] = self.fresh[dataset], []
        for prim in fresh:
            inside |= np.asarray(self.held[prim].view.match(every), dtype=bool)  # type: ignore[union-attr]
        rows = {k: table[k] for k in keys[inside].tolist()}
        self.sent[dataset] |= set(rows)
        frame = batch(
            self.seq[dataset],
            columns_of(info, rows) if rows else None,
            dataset=dataset,
            key=info.key,
            tick=self.tick,
            snapshots=fresh,
        )
        self.take(self.core.on_batch(frame))


def apply(push: Push, rows: dict[Any, dict[str, Any]], key: str) -> None:
    """A push applied as the client library applies it."""
    if push.full:
        rows.clear()
    for gone in to_python(decode_columns(push.left).get(key, np.empty(0))):
        del rows[gone]
    for section in (decode_columns(push.entered), decode_columns(push.updated)):
        names = list(section)
        for values in zip(*(to_python(section[n]) for n in names), strict=True):
            row = dict(zip(names, values, strict=True))
            rows[row[key]] = row


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
@given(st.lists(PREDICATES, min_size=1, max_size=3), PREDICATES, CHANGES)
def test_every_push_is_duckdbs_answer_on_the_publishers_rows(
    predicates: list[str], joined: str, changes: list[tuple[dict, set[int], dict]]
) -> None:
    core = ready_core(T, U, policy=Policy(grace=0.0))
    publisher = Publisher(core)
    texts = [f"SELECT * FROM t WHERE {p}" for p in predicates]
    qualified = re.sub(r"\b([absfx])\b", r"t.\1", joined)
    texts.append(f"SELECT t.id, t.b, u.w FROM t JOIN u ON t.a = u.a WHERE {qualified}")
    keys: dict[int, str] = {}
    for sub, text in enumerate(texts, start=1):
        publisher.take(core.on_subscribe(1, Subscribe(sub, "t", sql(text), rate=1000.0)))
    held: dict[int, dict[Any, dict[str, Any]]] = {sub: {} for sub in range(1, len(texts) + 1)}
    now = 0.0
    for upserts_t, deletes_t, upserts_u in changes:
        publisher.change("t", upserts_t, deletes_t - set(upserts_t))
        publisher.change("u", upserts_u, set())
        now += 1.0
        publisher.take(core.pushes(now, lambda client: True))
        frames, publisher.out = publisher.out, []
        for frame in frames:
            assert not isinstance(frame, Error), frame
            if isinstance(frame, Subscribed):
                keys[frame.sub] = frame.key
            if isinstance(frame, Push):
                apply(frame, held[frame.sub], keys[frame.sub])
        tables = {name: oracle_table(info, publisher.rows[name]) for name, info in INFOS.items()}
        for sub, text in enumerate(texts, start=1):
            # DuckDB spells the length of a BLOB octet_length (the relay rewrites length(x))
            names, want = duckdb_answer(re.sub(r"\blength\(", "octet_length(", text), tables)
            got = list(held[sub].values())
            assert same_rows(got, names, want), f"{text}: relay {got}, DuckDB {want}"


def test_a_snapshot_stamped_with_the_last_seq_readies_its_primitive_when_nothing_changes() -> None:
    """A quiet dataset's new primitive gets its snapshot in a batch stamped with the last seq
    (the publisher's idle snapshots). When every row of it is held already, as it is, the
    relay's copy does not change, yet the primitive must become ready and its view be pushed
    (it once waited for the dataset's next change, forever on a quiet one)."""
    core = ready_core(T, policy=Policy(grace=0.0))
    publisher = Publisher(core)
    rows = {
        1: {"a": 1, "b": 0.0, "s": "x", "f": True, "x": b"a"},
        2: {"a": 2, "b": 2.5, "s": None, "f": None, "x": None},
    }
    publisher.take(
        core.on_subscribe(1, Subscribe(1, "t", sql("SELECT * FROM t WHERE a > 0"), rate=1000.0))
    )
    publisher.change("t", rows, set())
    publisher.take(core.pushes(1.0, lambda client: True))
    publisher.take(
        core.on_subscribe(1, Subscribe(2, "t", sql("SELECT id FROM t WHERE b > 1"), rate=1000.0))
    )
    assert publisher.fresh["t"], "the view needs a primitive of its own"
    publisher.idle("t")
    publisher.take(core.pushes(2.0, lambda client: True))
    pushed = [frame for frame in publisher.out if isinstance(frame, Push) and frame.sub == 2]
    assert len(pushed) == 1 and pushed[0].full
    assert decode_columns(pushed[0].entered)["id"].tolist() == [2]
