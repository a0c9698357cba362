"""The ingest log of producers' events: checked, durable appends; offsets; trimming."""

from __future__ import annotations

import datetime
import math
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from fanout.errors import BadRequest, ConfigError
from fanout.publisher.datasets import Dataset, IngestSource
from fanout.publisher.sources.producerlog import (
    IngestBacklog,
    IngestEvent,
    IngestLog,
    IngestLogError,
)


def ingest_dataset(name: str, schema: dict[str, Any], key: str) -> Dataset:
    return Dataset(
        name=name,
        key=key,
        schema=schema,
        index="sql",
        index_columns=tuple(schema),
        source=IngestSource(),
    )


ORDERS = ingest_dataset(
    "orders",
    {
        "id": "long",
        "item": "string",
        "qty": "int",
        "price": "double",
        "w": "float",
        "ok": "boolean",
    },
    "id",
)
TOPICS = ingest_dataset("topics", {"topic": "string", "v": "long"}, "topic")

VALUES = {
    "long": st.integers(-(2**63), 2**63 - 1),
    "int": st.integers(-(2**31), 2**31 - 1),
    "double": st.floats(allow_nan=False),
    "float": st.floats(allow_nan=False, width=32),
    "string": st.text(max_size=8),
    "boolean": st.booleans(),
}
KEYS = {"orders": st.integers(0, 5), "topics": st.sampled_from(["a", "a/b", "c"])}


def events(dataset: Dataset) -> st.SearchStrategy[list[IngestEvent]]:
    """Upserts (every column, some null) and deletes of a few keys."""
    values = st.fixed_dictionaries(
        {
            name: st.none() | VALUES[kind]
            for name, kind in dataset.schema.items()
            if name != dataset.key
        }
    )
    event = st.builds(IngestEvent, KEYS[dataset.name], st.none() | values)
    return st.lists(event, max_size=6)


def expected_row(dataset: Dataset, offset: int, event: IngestEvent) -> dict[str, Any]:
    values = dict.fromkeys(dataset.schema) | (event.values or {}) | {dataset.key: event.key}
    return {**values, "_version": offset, "_deleted": event.values is None}


class IngestLogMachine(RuleBasedStateMachine):
    """The log against an in-memory oracle: a list of events per dataset and a trim floor."""

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.TemporaryDirectory()
        self.path = Path(self.folder.name) / "ingest.db"
        self.log = IngestLog(self.path, [ORDERS, TOPICS])
        self.events: dict[str, list[IngestEvent]] = {"orders": [], "topics": []}
        self.floor = {"orders": 0, "topics": 0}

    def teardown(self) -> None:
        self.log.close()
        self.folder.cleanup()

    @rule(data=st.data(), dataset=st.sampled_from([ORDERS, TOPICS]))
    def append(self, data: st.DataObject, dataset: Dataset) -> None:
        batch = data.draw(events(dataset))
        offsets = self.log.append(dataset.name, batch)
        known = self.events[dataset.name]
        assert offsets == list(range(len(known) + 1, len(known) + 1 + len(batch)))
        known.extend(batch)

    @rule(data=st.data(), bad=st.sampled_from(["type", "unknown", "missing", "key"]))
    def append_with_one_bad_event_appends_nothing(self, data: st.DataObject, bad: str) -> None:
        batch = data.draw(events(ORDERS))
        wrong = {
            "type": IngestEvent(1, {"item": 3, "qty": 1, "price": 1.0, "w": 1.0, "ok": True}),
            "unknown": IngestEvent(1, {"nope": 1}),
            "missing": IngestEvent(1, {"item": "x"}),
            "key": IngestEvent(None),
        }[bad]
        batch.insert(data.draw(st.integers(0, len(batch))), wrong)
        with pytest.raises(BadRequest):
            self.log.append("orders", batch)

    @rule(data=st.data(), dataset=st.sampled_from(["orders", "topics"]))
    def read(self, data: st.DataObject, dataset: str) -> None:
        head, floor = len(self.events[dataset]), self.floor[dataset]
        after = data.draw(st.integers(floor, head))
        upto = data.draw(st.integers(after, head))
        table = self.log.read(dataset, after, upto)
        schema = ORDERS if dataset == "orders" else TOPICS
        expected = [
            expected_row(schema, offset, self.events[dataset][offset - 1])
            for offset in range(after + 1, upto + 1)
        ]
        assert table.to_pylist() == expected

    @rule(data=st.data())
    def read_outside_the_log_is_refused(self, data: st.DataObject) -> None:
        head, floor = len(self.events["orders"]), self.floor["orders"]
        beyond = [(head, head + 1)] + ([(floor - 1, head)] if floor else [])
        after, upto = data.draw(st.sampled_from(beyond))
        with pytest.raises(IngestLogError):
            self.log.read("orders", after, upto)

    @rule(data=st.data(), dataset=st.sampled_from(["orders", "topics"]))
    def trim(self, data: st.DataObject, dataset: str) -> None:
        upto = data.draw(st.integers(0, len(self.events[dataset])))
        self.log.trim(dataset, upto)
        self.floor[dataset] = max(self.floor[dataset], upto)

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = IngestLog(self.path)

    @invariant()
    def offsets_and_floors_match(self) -> None:
        for dataset, known in self.events.items():
            assert self.log.latest(dataset) == len(known)
            assert self.log.trimmed(dataset) == self.floor[dataset]


TestIngestLog = IngestLogMachine.TestCase
TestIngestLog.settings = settings(max_examples=40, stateful_step_count=20)


@pytest.fixture
def log(tmp_path: Path):
    with IngestLog(tmp_path / "ingest.db", [ORDERS, TOPICS]) as opened:
        yield opened


ROW = {"item": "x", "qty": 1, "price": 2.0, "w": 0.5, "ok": True}


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (IngestEvent(1, {**ROW, "qty": "1"}), "column 'qty' is int, not '1'"),
        (IngestEvent(1, {**ROW, "qty": 2**31}), "column 'qty' is int"),
        (IngestEvent(1, {**ROW, "qty": True}), "column 'qty' is int, not True"),
        (IngestEvent(1, {**ROW, "ok": 1}), "column 'ok' is boolean"),
        (IngestEvent(1, {**ROW, "w": 1e39}), "column 'w' is float"),
        (IngestEvent(1, {**ROW, "colour": "red"}), "no column 'colour'"),
        (IngestEvent(1, {"item": "x"}), "an upsert gives every column; missing 'qty'"),
        (IngestEvent(None, ROW), r"event 1: no key \(column 'id'\)"),
        (IngestEvent("1", ROW), "column 'id' is long, not '1'"),
        (IngestEvent(1, {**ROW, "id": 2}), "column 'id' differs from the event's key"),
    ],
)
def test_bad_events_are_refused_naming_the_column(log, event, message) -> None:
    with pytest.raises(BadRequest, match=message):
        log.append("orders", [IngestEvent(0, ROW), event])
    assert log.latest("orders") == 0


def test_a_topic_dataset_refuses_what_is_no_topic_name(tmp_path) -> None:
    # Relays match a topic dataset's rows through the MQTT topic index and the coverage algebra
    # leaves "" out: such rows would be served to nobody, or differently by relay and publisher.
    sensors = Dataset(
        name="sensors",
        key="topic",
        schema={"topic": "string", "v": "long"},
        index="topic",
        index_columns=("topic",),
        source=IngestSource(),
    )
    with IngestLog(tmp_path / "ingest.db", [sensors]) as opened:
        for bad, message in [("", "empty"), ("a/#", "wildcard '#'"), ("a/+/b", "wildcard '+'")]:
            with pytest.raises(
                BadRequest, match=f"event 1: column 'topic': .*{re.escape(message)}"
            ):
                opened.append("sensors", [IngestEvent("a/b", {"v": 1}), IngestEvent(bad, {"v": 2})])
        assert opened.latest("sensors") == 0
        assert opened.append("sensors", [IngestEvent("/", {"v": 1}), IngestEvent("", None)]) == [
            1,
            2,
        ]


def test_values_are_stored_as_their_column_types(log) -> None:
    # ints for doubles, and numpy scalars (as columnar frames decode to) are taken as values
    values = {**ROW, "price": 3, "w": -math.inf, "qty": None, "ok": np.bool_(True)}
    log.append("orders", [IngestEvent(np.int64(7), values)])
    row = log.read("orders", 0, 1).to_pylist()[0]
    assert row == {**ROW, "id": 7, "price": 3.0, "w": -math.inf, "qty": None} | {
        "_version": 1,
        "_deleted": False,
    }
    assert log.read("orders", 0, 1).schema.field("price").type == pa.float64()


def test_unknown_datasets_and_changed_schemas_are_refused(log) -> None:
    with pytest.raises(BadRequest, match="dataset 'nope' takes no published events"):
        log.append("nope", [IngestEvent(1)])
    log.append("topics", [IngestEvent("a", {"v": 1})])
    changed = ingest_dataset("topics", {"topic": "string", "v": "double"}, "topic")
    with pytest.raises(ConfigError, match=r"still holds events 1\.\.1"):
        log.declare(changed)
    log.trim("topics", 1)
    log.declare(changed)  # nothing pending: the new columns apply
    log.append("topics", [IngestEvent("a", {"v": 1.5})])
    assert log.read("topics", 1, 2).column("v").to_pylist() == [1.5]


def test_the_backlog_is_bounded(tmp_path) -> None:
    with IngestLog(tmp_path / "ingest.db", [TOPICS], max_backlog=3) as small:
        small.append("topics", [IngestEvent("a", {"v": i}) for i in range(3)])
        with pytest.raises(IngestBacklog, match="3 published events are not yet in the state"):
            small.append("topics", [IngestEvent("b")])
        small.trim("topics", 2)
        assert small.append("topics", [IngestEvent("b"), IngestEvent("c")]) == [4, 5]


CHILD = textwrap.dedent(
    """
    import sys
    from fanout.publisher.datasets import Dataset, IngestSource
    from fanout.publisher.sources.producerlog import IngestEvent, IngestLog

    dataset = Dataset(
        name="topics", key="topic", schema={"topic": "string", "v": "long"}, index="sql",
        index_columns=("topic", "v"), source=IngestSource(),
    )
    log = IngestLog(sys.argv[1], [dataset])
    batch = 0
    while True:
        offsets = log.append("topics", [IngestEvent(f"t{batch}", {"v": i}) for i in range(50)])
        print(offsets[-1], flush=True)
        batch += 1
    """
)


def test_an_acknowledged_append_survives_kill_9(tmp_path) -> None:
    path = tmp_path / "ingest.db"
    command = [sys.executable, "-c", CHILD, str(path)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None
            acknowledged = [int(child.stdout.readline()) for _ in range(20)]
            child.send_signal(signal.SIGKILL)  # while it appends batch 21 or later
        finally:
            child.kill()
    assert acknowledged == [50 * (batch + 1) for batch in range(20)]
    with IngestLog(path) as log:
        latest = log.latest("topics")
        assert latest >= acknowledged[-1]
        assert latest % 50 == 0  # an interrupted append left nothing behind
        rows = log.read("topics", 0, latest).to_pylist()
    assert [(row["topic"], row["v"], row["_version"]) for row in rows] == [
        (f"t{offset // 50}", offset % 50, offset + 1) for offset in range(latest)
    ]


TYPED = ingest_dataset(
    "typed",
    {"id": "long", "at": "timestamp", "day": "date", "fare": "decimal(6,2)"},
    "id",
)
UTC = datetime.UTC
TYPED_ROW = {
    "at": datetime.datetime(2024, 3, 1, 12, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
    "day": datetime.date(2024, 2, 29),
    "fare": Decimal("1234.50"),
}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"at": "2024-03-01 12:00"}, "column 'at' is timestamp, not '2024-03-01 12:00'"),
        ({"at": datetime.datetime(2024, 3, 1)}, "column 'at' is timestamp.*needs a time zone"),
        ({"day": datetime.datetime(2024, 3, 1, tzinfo=UTC)}, "column 'day' is date"),
        ({"day": "2024-03-01"}, "column 'day' is date"),
        ({"fare": Decimal("12345.00")}, r"column 'fare' is decimal\(6,2\)"),  # 7 digits
        ({"fare": Decimal("1.005")}, r"column 'fare' is decimal\(6,2\)"),  # 3 decimals
        ({"fare": 1.5}, r"column 'fare' is decimal\(6,2\), not 1.5"),  # a float is not exact
        ({"fare": "one"}, r"column 'fare' is decimal\(6,2\)"),
        ({"fare": Decimal("NaN")}, r"column 'fare' is decimal\(6,2\)"),
    ],
)
def test_a_value_that_does_not_fit_its_column_is_refused_and_nothing_applied(
    tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    with IngestLog(tmp_path / "ingest.db", [TYPED]) as opened:
        with pytest.raises(BadRequest, match=f"event 1: {message}"):
            opened.append(
                "typed", [IngestEvent(1, TYPED_ROW), IngestEvent(2, {**TYPED_ROW, **values})]
            )
        assert opened.latest("typed") == 0


def test_timestamps_dates_and_decimals_are_stored_exactly(tmp_path: Path) -> None:
    with IngestLog(tmp_path / "ingest.db", [TYPED]) as opened:
        rows = [
            IngestEvent(1, TYPED_ROW),
            IngestEvent(2, {"at": None, "day": None, "fare": None}),
            IngestEvent(3, {**TYPED_ROW, "fare": 7, "at": TYPED_ROW["at"].replace(microsecond=1)}),
            IngestEvent(4, {**TYPED_ROW, "fare": "9999.99"}),
        ]
        opened.append("typed", rows)
        table = opened.read("typed", 0, 4)
    assert table.schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert table.schema.field("fare").type == pa.decimal128(6, 2)
    got = table.to_pylist()
    assert got[0]["at"] == datetime.datetime(2024, 3, 1, 10, tzinfo=UTC)  # the same instant
    assert got[0]["day"] == datetime.date(2024, 2, 29)
    assert got[0]["fare"] == Decimal("1234.50")
    assert (got[1]["at"], got[1]["day"], got[1]["fare"]) == (None, None, None)
    assert got[2]["at"] == datetime.datetime(2024, 3, 1, 10, 0, 0, 1, tzinfo=UTC)
    assert got[2]["fare"] == Decimal("7.00")
    assert got[3]["fare"] == Decimal("9999.99")
