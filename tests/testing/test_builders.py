"""Catalog entries, batches and a ready relay core as tests build them (testing/catalog.py,
testing/batches.py, testing/relaycore.py)."""

from __future__ import annotations

import numpy as np

from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import UPSTREAM
from fanout.testing.batches import batch, rows
from fanout.testing.catalog import AGENTS, agents, catalog, sensors
from fanout.testing.relaycore import frames_to, ready_core
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.columns import decode_columns
from fanout.wire.messages import Acquire, Catalog, DatasetInfo, Push, Subscribe


def test_agents_is_the_space_dataset_and_takes_more_columns() -> None:
    xy = {"id": "<i8", "x": "<f8", "y": "<f8"}
    assert DatasetInfo("agents", "id", xy, "space", ["x", "y"]) == AGENTS
    assert agents("cars", kind="<i4", nullable=("kind",)) == DatasetInfo(
        "cars", "id", xy | {"kind": "<i4"}, "space", ["x", "y"], ["kind"]
    )
    assert list(agents(label="str").columns) == ["id", "x", "y", "label"]


def test_sensors_is_the_topic_dataset() -> None:
    assert sensors(value="v") == DatasetInfo(
        "sensors", "topic", {"topic": "str", "v": "<f8"}, "topic", ["topic"]
    )
    assert catalog() == Catalog([AGENTS])
    assert catalog(sensors()).datasets == [sensors()]


def test_a_batch_carries_its_rows_and_deletes_across_the_wire() -> None:
    sent = batch(3, rows(k1=(1, 2), k7=(3, 4)), deletes=[5], snapshots=[9], tick_time=1.5)
    received = codec.from_publisher().decode(codec.encode(sent))
    assert received == sent
    assert (sent.dataset, sent.epoch, sent.seq, sent.tick, sent.snapshots) == (
        "agents",
        1,
        3,
        3,
        [9],
    )
    upserts = decode_columns(sent.upserts)
    assert upserts["id"].tolist() == [1, 7]
    assert upserts["x"].tolist() == [1.0, 3.0]
    assert decode_columns(sent.deletes)["id"].dtype == np.int64
    assert decode_columns(sent.deletes)["id"].tolist() == [5]


def test_an_empty_batch_deletes_nothing_in_the_key_column_it_is_given() -> None:
    empty = batch(0, dataset="sensors", key="topic", epoch=2, tick=40)
    assert (empty.epoch, empty.tick, empty.upserts.length) == (2, 40, 0)
    assert empty.deletes.names == ["topic"]


def test_a_ready_core_acquires_a_view_and_serves_it_from_a_batch() -> None:
    core = ready_core(policy=Policy(widen="exact", grace=0.0))
    sends = core.on_subscribe(1, Subscribe(1, "agents", Box((0, 0), (10, 10)), rate=1e3))
    (acquire,) = frames_to(sends, UPSTREAM)
    assert isinstance(acquire, Acquire)
    assert acquire.view == Box((0, 0), (10, 10))
    core.on_batch(batch(0, rows(k1=(1, 1), k2=(20, 20)), snapshots=[acquire.prim]))
    (push,) = frames_to(core.pushes(100.0, lambda client: True), 1)
    assert isinstance(push, Push)
    assert decode_columns(push.entered)["id"].tolist() == [1]


def test_a_ready_core_knows_the_datasets_it_is_given() -> None:
    core = ready_core(AGENTS, sensors(), max_subscriptions=5)
    assert sorted(core.datasets) == ["agents", "sensors"]
