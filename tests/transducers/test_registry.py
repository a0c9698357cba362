"""Transducers found by name: the built-in ``window``, installed ones from their entry points
(the example ``crossings`` from fanout's own pyproject.toml), refusals naming what is offered."""

from __future__ import annotations

import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path

import pyarrow as pa
import pytest
from tests.transducers.streams import SCHEMA, apply, frames

from fanout.transducers import GROUP, InvalidTransducer, Transducers
from fanout.transducers.crossings import Crossings
from fanout.wire.options import Transduce

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"


def declared() -> list[EntryPoint]:
    """The transducers fanout's pyproject.toml registers (as an installed fanout has them)."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    points = project["entry-points"][GROUP]
    return [EntryPoint(name, value, GROUP) for name, value in points.items()]


def test_pyproject_registers_the_example_transducer() -> None:
    transducers = Transducers(points=declared())
    assert transducers.names() == ["crossings", "window"]
    assert [point.load() for point in declared()] == [Crossings]


def test_an_unknown_transducer_is_refused_naming_those_offered() -> None:
    with pytest.raises(
        InvalidTransducer, match="no transducer 'nope' on this relay \\(it has crossings, window\\)"
    ):
        Transducers(points=declared()).start(Transduce("nope"), SCHEMA)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"column": "v"}, "takes column"),
        ({"column": "v", "above": "high"}, "finite number"),
        ({"column": "w", "above": 1}, "no column 'w'"),
    ],
)
def test_crossings_refuses_bad_parameters(params, message) -> None:
    with pytest.raises(InvalidTransducer, match=message):
        Transducers(points=declared()).start(Transduce("crossings", params), SCHEMA)


def test_a_factory_that_raises_is_a_refusal() -> None:
    def broken(params: object) -> object:
        raise KeyError("wanted")

    point = EntryPoint("broken", "x:y", GROUP)
    transducers = Transducers(points=[point])
    transducers._factories = {"broken": broken}  # as if loaded from the entry point
    with pytest.raises(InvalidTransducer, match="'broken' refused its parameters: KeyError"):
        transducers.start(Transduce("broken"), SCHEMA)


def test_a_transducer_whose_output_raises_is_a_refusal() -> None:
    class Picky:
        ticks = 1

        def __init__(self, params: object) -> None:
            pass

        def output(self, schema: pa.Schema) -> tuple[str, list[str]]:
            raise LookupError("no speed column")

        def evaluate(self, history: pa.Table) -> pa.Table:
            raise AssertionError("never evaluated")

    transducers = Transducers(points=[])
    transducers._factories = {"picky": Picky}  # as if loaded from an entry point
    with pytest.raises(InvalidTransducer, match="'picky' refused the view: LookupError"):
        transducers.start(Transduce("picky"), SCHEMA)


def test_crossings_says_when_a_value_goes_above_and_comes_back() -> None:
    spec = Transduce("crossings", {"column": "v", "above": 0})
    session = Transducers(points=declared()).start(spec, SCHEMA)
    assert (session.key, session.columns) == ("id", ["id", "event", "v"])
    ticks = [
        ({1: (0, 1.0), 2: (0, -1.0)}, True),
        ({1: (0, 2.0), 2: (0, 3.0)}, False),
        ({1: (0, -2.0)}, False),
    ]
    seen = []
    held: dict[object, tuple[object, ...]] = {}  # the output: each tick's events
    for frame in frames(ticks):
        apply(held, session.step(frame), session.key)
        seen.append(sorted(held.values()))
    assert seen == [
        [(1, "start", 1.0)],
        [(2, "start", 3.0)],
        [(1, "stop", -2.0), (2, "stop", None)],
    ]
    assert isinstance(session.window.table(), pa.Table)
