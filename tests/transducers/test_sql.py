"""The ``window`` transducer against a brute-force evaluation of the same windows: counts per
cell, moving averages per key and events when a condition starts or stops, over random streams
(the oracle reads the contents, never the window or the SQL)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.transducers.streams import SCHEMA, Content, apply, contents, frames

from fanout.transducers import Budget, InvalidTransducer, Transducers
from fanout.wire.options import Transduce

ORACLE = settings(max_examples=60, deadline=None)
TRANSDUCERS = Transducers(Budget(seconds=60))  # a loaded machine's evaluations stay in it

COUNTS = "SELECT cell, count(*) AS n FROM history GROUP BY cell"
MEANS = "SELECT id, avg(v) AS mean, count(*) AS seen FROM history GROUP BY id"
EVENTS = """
    SELECT id, CASE WHEN bool_or(_age = 0 AND v > 0) THEN 'start' ELSE 'stop' END AS event
    FROM history GROUP BY id
    HAVING bool_or(_age = 0 AND v > 0) <> bool_or(_age = 1 AND v > 0)
"""


def counts(window: list[Content]) -> dict[object, tuple[object, ...]]:
    found = Counter(cell for content in window for cell, _ in content.values())
    return {cell: (cell, n) for cell, n in found.items()}


def means(window: list[Content]) -> dict[object, tuple[object, ...]]:
    values: dict[int, list[float]] = defaultdict(list)
    for content in window:
        for key, (_, v) in content.items():
            values[key].append(v)
    return {key: (key, sum(vs) / len(vs), len(vs)) for key, vs in values.items()}


def events(window: list[Content]) -> dict[object, tuple[object, ...]]:
    now = {k for k, (_, v) in window[-1].items() if v > 0}
    before = {k for k, (_, v) in window[-2].items() if v > 0} if len(window) > 1 else set()
    return {k: (k, "start" if k in now else "stop") for k in now ^ before}


def same(
    held: dict[object, tuple[object, ...]], expected: dict[object, tuple[object, ...]]
) -> bool:
    if held.keys() != expected.keys():
        return False
    for key, row in expected.items():
        got = held[key]
        for a, b in zip(got, row, strict=True):
            if isinstance(b, float) and not math.isclose(a, b, abs_tol=1e-9):  # type: ignore[arg-type]
                return False
            if not isinstance(b, float) and a != b:
                return False
    return True


@ORACLE
@given(
    ticks=contents(),
    length=st.integers(1, 4),
    case=st.sampled_from([(COUNTS, counts, 0), (MEANS, means, 0), (EVENTS, events, 2)]),
)
def test_window_queries_match_a_brute_force_evaluation(ticks, length, case) -> None:
    query, oracle, fixed = case
    length = fixed or length
    params = {"query": query, "ticks": length}
    session = TRANSDUCERS.start(Transduce("window", params), SCHEMA)
    held: dict[object, tuple[object, ...]] = {}
    for at, frame in enumerate(frames(ticks)):
        output = session.step(frame)
        assert (output.seq, output.tick) == (frame.seq, frame.tick)
        apply(held, output, session.key)
        window = [content for content, _ in ticks[max(0, at + 1 - length) : at + 1]]
        assert same(held, oracle(window)), (at, held, oracle(window))


def test_the_output_names_its_key_and_columns() -> None:
    params = {"query": "SELECT avg(v) AS mean, cell FROM history GROUP BY cell", "key": "cell"}
    session = TRANSDUCERS.start(Transduce("window", params), SCHEMA)
    assert (session.key, session.columns) == ("cell", ["cell", "mean"])


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"query": "SELECT * FROM orders"}, "may read only 'history'"),
        ({"query": "SELECT * FROM read_csv('/etc/passwd')"}, "may read only 'history'"),
        ({"query": "SELECT 1 FROM history; SELECT 2 FROM history"}, "one SELECT"),
        ({"query": "DELETE FROM history"}, "one SELECT"),
        ({"query": "SELECT nope FROM history"}, "does not bind"),
        ({"query": "SELECT id, id FROM history"}, "named 'id'"),
        ({"query": "SELECT id FROM history", "key": "cell"}, "not an output column"),
        ({"query": "SELECT id FROM history", "ticks": 0}, "ticks must be"),
        ({"query": "SELECT id FROM history", "ticks": 10**6}, "ticks must be"),
        ({"query": "SELECT id FROM history", "seconds": 3}, "takes query, ticks and key"),
        ({}, "needs a query"),
    ],
)
def test_bad_window_queries_are_refused_with_the_reason(params, message) -> None:
    with pytest.raises(InvalidTransducer, match=message):
        TRANSDUCERS.start(Transduce("window", params), SCHEMA)


def test_ctes_and_window_functions_are_allowed() -> None:
    query = """
        WITH newest AS (SELECT * FROM history WHERE _age = 0)
        SELECT id, v - lag(v) OVER (PARTITION BY id ORDER BY _seq) AS change FROM history
        WHERE id IN (SELECT id FROM newest) QUALIFY _age = 0
    """
    session = TRANSDUCERS.start(Transduce("window", {"query": query, "ticks": 2}), SCHEMA)
    assert session.columns == ["id", "change"]
