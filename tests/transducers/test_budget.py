"""A transducer over its budget, or failing, is stopped with a reason its subscriber can read."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from tests.transducers.streams import SCHEMA, frames

from fanout.transducers import Budget, OverBudget, Transducers, TransducerStopped
from fanout.wire.columns import encode_columns
from fanout.wire.messages import Push
from fanout.wire.options import Transduce


class Points:
    """Entry points as ``importlib.metadata`` gives them, for transducers defined here."""

    def __init__(self, name: str, factory: object) -> None:
        self.name = name
        self._factory = factory

    def load(self) -> object:
        return self._factory


class Echo:
    """A Python transducer: the newest tick's rows, or what ``make`` makes of them."""

    ticks = 1

    def __init__(self, params: Mapping[str, Any]) -> None:
        self.make = params.get("make", lambda table: table)

    def output(self, schema: pa.Schema) -> tuple[str, list[str]]:
        return "id", ["id", "v"]

    def evaluate(self, history: pa.Table) -> pa.Table:
        return self.make(history.select(["id", "v"]))


def session(budget: Budget | None = None, clock=None, **params: Any):
    transducers = Transducers(budget, [Points("echo", Echo)], **({"clock": clock} if clock else {}))
    return transducers.start(Transduce("echo", params), SCHEMA)


STREAM = frames([({1: (0, 1.0), 2: (1, 2.0), 3: (1, 3.0)}, True)])


def test_a_python_transducer_that_overruns_is_stopped_after_the_tick() -> None:
    seconds = itertools.count(0.0, 0.25)  # each reading a quarter second later
    running = session(Budget(seconds=0.1), clock=lambda: next(seconds))
    with pytest.raises(OverBudget, match=r"took 0\.250 s, more than the 0\.1 s"):
        running.step(STREAM[0])


def test_an_output_past_its_rows_is_stopped() -> None:
    with pytest.raises(OverBudget, match="output has 3 rows, more than the 2"):
        session(Budget(output_rows=2)).step(STREAM[0])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda table: table.slice(0, 0).append_column("x", pa.array([])), "not \\['id', 'v'\\]"),
        (lambda table: pa.concat_tables([table, table]), "two rows keyed alike"),
        (lambda table: 1 / 0, "ZeroDivisionError: division by zero"),
        (
            lambda table: table.set_column(0, "id", pa.nulls(table.num_rows, pa.int64())),
            "a row whose key 'id' is NULL",
        ),
    ],
)
def test_a_failing_transducer_is_stopped_with_the_reason(make, message) -> None:
    with pytest.raises(TransducerStopped, match=message):
        session(make=make).step(STREAM[0])


def test_a_window_query_past_its_time_is_interrupted() -> None:
    transducers = Transducers(Budget(seconds=0.01))
    query = "SELECT count(*) AS n FROM history a, history b, history c, history d, history e"
    running = transducers.start(Transduce("window", {"query": query}), SCHEMA)
    rows = encode_columns(
        {"id": np.arange(500), "cell": np.zeros(500, np.int64), "v": np.zeros(500)}
    )
    none = encode_columns({})
    with pytest.raises(OverBudget, match=r"ran longer than 0\.01 s and was stopped"):
        running.step(Push(1, 1, 1, 10, 1.0, True, rows, none, none))
    assert transducers.engine.watchdog.interrupted == 1


def test_budgets_must_be_positive() -> None:
    with pytest.raises(ValueError, match="> 0 seconds"):
        Budget(seconds=0)
    with pytest.raises(ValueError, match=">= 1"):
        Budget(cells=0)
