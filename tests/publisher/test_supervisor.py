"""``publisher.supervisor``: the restart backoff against a brute-force account of it, and
``app.supervise`` driving a pipeline's query with fakes for Spark's query and the control plane."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.publisher.app import summary, supervise
from fanout.publisher.supervisor import Backoff, Restarts
from fanout.wire.messages import DatasetState


@given(
    first=st.floats(0.01, 10),
    most=st.floats(0.01, 1000),
    healthy=st.integers(0, 100),
    ends=st.lists(
        st.tuples(st.integers(0, 2000), st.integers(0, 2000), st.integers(0, 3)), max_size=20
    ),
)
def test_the_wait_doubles_per_failure_in_a_row_up_to_most_and_health_resets_it(
    first, most, healthy, ends
) -> None:
    """``ends``: per run, tenths of seconds the query ran, tenths it stayed down past its due
    time, and how many restarts Spark refused before one took; the first run starts at 0."""
    if first > most:
        first, most = most, first
    restarts = Restarts(Backoff(first, most, healthy))
    now, in_a_row = 0.0, 0

    def expected() -> float:  # the oracle: doubling counted by hand
        wait = first
        for _ in range(in_a_row - 1):
            wait = min(most, wait * 2)
        return min(most, wait)

    for tenths_ran, tenths_late, refused in ends:
        now += tenths_ran / 10
        in_a_row = 1 if tenths_ran / 10 >= healthy else in_a_row + 1
        wait = restarts.failed(now, "boom")
        assert wait == pytest.approx(expected())
        for _ in range(refused):  # a restart that does not take is one more failure in a row
            now += wait
            assert restarts.is_due(now)
            in_a_row += 1
            wait = restarts.failed(now, "refused")
            assert wait == pytest.approx(expected())
        assert not restarts.is_due(now + wait * 0.999)
        now += wait + tenths_late / 10
        assert restarts.is_due(now)
        restarts.restarted(now)
    assert restarts.total == len(ends)


def test_a_backoff_is_checked() -> None:
    with pytest.raises(ValueError, match="first <= most"):
        Backoff(5, 1)
    with pytest.raises(ValueError, match="at least one failure"):
        Backoff().delay(0)
    assert Backoff(1, 60).delay(1000) == 60  # no overflow far along


def test_the_summary_of_sparks_exception_is_its_first_cause() -> None:
    text = (
        "An exception was raised by the Python Proxy. Return Message: Traceback:\n"
        "  py4j.protocol.Py4JJavaError: An error occurred while calling o182.getResult.\n"
        "Caused by: org.apache.spark.SparkException: Job aborted: Python worker exited\n"
        "Caused by: java.io.IOException: Broken pipe\n"
    )
    assert summary(text) == "org.apache.spark.SparkException: Job aborted: Python worker exited"
    assert summary("[STREAM_FAILED] Query terminated\n  at x") == "[STREAM_FAILED] Query terminated"
    assert summary("") == "no message"
    assert len(summary("x" * 10_000)) == 300


@dataclass
class FakeQuery:
    name: str = "fanout-agents"
    isActive: bool = True  # noqa: N815 (Spark's name)
    error: Exception | None = None

    def exception(self) -> Exception | None:
        return self.error


@dataclass
class FakeDataset:
    name: str = "agents"


@dataclass
class FakePipeline:
    """A pipeline whose query fails when told; restarts fail ``refusals`` times first."""

    dataset: FakeDataset = field(default_factory=FakeDataset)
    restarts: Restarts = field(default_factory=lambda: Restarts(Backoff(1, 8, 60)))
    query: FakeQuery = field(default_factory=FakeQuery)
    refusals: int = 0
    started: int = 0

    def restart(self, trigger: float) -> FakeQuery:
        if self.refusals:
            self.refusals -= 1
            from pyspark.errors import PySparkException

            raise PySparkException("Caused by: no executors")
        self.started += 1
        self.query = FakeQuery()
        return self.query


@dataclass
class FakeControl:
    told: list[DatasetState] = field(default_factory=list)

    def announce(self, state: DatasetState) -> None:
        self.told.append(state)


def test_a_failed_query_is_restarted_after_its_backoff_and_relays_hear_both_ends(capsys) -> None:
    pipeline, control = FakePipeline(refusals=1), FakeControl()
    supervise(pipeline, control, 0.0, 100.0)  # type: ignore[arg-type]
    assert control.told == []  # it runs: nothing to do
    pipeline.query.isActive, pipeline.query.error = False, RuntimeError("worker lost")
    supervise(pipeline, control, 0.0, 100.0)  # type: ignore[arg-type]
    assert control.told == [DatasetState("agents", False, "worker lost", 1.0)]
    assert "fanout-agents failed: worker lost; restarting in 1 s" in capsys.readouterr().err
    supervise(pipeline, control, 0.0, 100.5)  # type: ignore[arg-type]
    assert pipeline.started == 0 and len(control.told) == 1  # not due yet
    supervise(pipeline, control, 0.0, 101.0)  # type: ignore[arg-type]
    assert control.told[-1] == DatasetState("agents", False, "no executors", 2.0)  # refused
    supervise(pipeline, control, 0.0, 103.0)  # type: ignore[arg-type]
    assert pipeline.started == 1 and control.told[-1] == DatasetState("agents", True)
    assert pipeline.restarts.total == 1
