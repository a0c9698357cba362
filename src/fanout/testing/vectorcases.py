"""The cases ``testing.vectors`` writes as test vectors: one valid frame of every type and view
kind, and malformed frames with what their receiver must answer (docs/protocol.md, "Errors")."""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np

from fanout.views import Box, Intersection, RegionUnion, Relative, Sector, Sphere
from fanout.views.anyof import AnyOf
from fanout.views.entity import Entity
from fanout.views.objects import ObjectPath
from fanout.views.sql import Sql
from fanout.views.topic import TopicFilter
from fanout.wire.columns import encode_columns, from_values
from fanout.wire.messages import (
    PROTOCOL_VERSION,
    Acquire,
    Batch,
    Catalog,
    Curious,
    DatasetInfo,
    DatasetState,
    Error,
    Frame,
    Hello,
    Horizon,
    Knowledge,
    LiveWrites,
    MapWanted,
    NoUpdate,
    Pending,
    Publish,
    Published,
    Push,
    ReadState,
    Release,
    Responsibility,
    Resync,
    Settled,
    StateRows,
    Subscribe,
    Subscribed,
    Transform,
    Unsubscribe,
    Unsubscribed,
    Welcome,
    WorkerLoad,
    Written,
)
from fanout.wire.options import Relevance, Resume, Tier, Transduce


@dataclass(frozen=True)
class Valid:
    """A frame its receiver decodes (``direction``: which union decodes it)."""

    direction: str
    name: str
    description: str
    frame: Frame


TS = datetime.datetime(2026, 11, 29, 4, 30, 0, 250000, tzinfo=datetime.UTC)
ROWS = encode_columns(
    {
        "id": np.array([1, 2, 3], dtype="<i8"),
        "x": from_values([1.5, None, math.nan]),
        "kind": np.array([7, -1, 0], dtype="<i4"),
        "name": from_values(["a", None, "ünï"]),
        "ok": from_values([True, None, False]),
        "at": from_values([TS, None, TS]),
        "day": from_values([datetime.date(2026, 11, 29), datetime.date(1970, 1, 1), None]),
        "price": from_values([Decimal("12.50"), None, Decimal("-0.01")]),
        "blob": from_values([b"\x00\xff", None, b""]),
    }
)
KEYS = encode_columns({"id": np.array([4, 5], dtype="<i8")})
AGENTS = DatasetInfo("agents", "id", {"id": "<i8", "x": "<f8", "y": "<f8"}, "space", ["x", "y"])
FLIGHTS = DatasetInfo(
    "flights",
    "id",
    {"id": "<i8", "carrier": "str", "dep_delay": "<f8", "fare": "decimal(8,2)"},
    "sql",
    [],
    nullable=["dep_delay", "fare"],
)


def _subscribe(sub: int, view: Any, dataset: str = "agents") -> Subscribe:
    return Subscribe(sub=sub, dataset=dataset, view=view)


VIEWS: list[tuple[str, str, Any, str]] = [
    ("box", "a 2-D box: lo and hi corners", Box((0, 0), (100, 50)), "agents"),
    ("box_3d", "a 3-D box", Box((0, 0, -5), (10, 10, 5)), "agents"),
    ("sphere", "a disc: center and radius", Sphere((50, 50), 25), "agents"),
    ("sector", "a 2-D sector: heading in radians", Sector((0, 0), 10, 0.5, math.pi / 4), "agents"),
    (
        "sector_3d",
        "a 3-D cone: heading [azimuth, elevation]",
        Sector((0, 0, 0), 10, (0, 0.2), 1),
        "agents",
    ),
    (
        "union",
        "a union of regions",
        RegionUnion((Box((0, 0), (1, 1)), Sphere((5, 5), 1))),
        "agents",
    ),
    (
        "meet",
        "an intersection of regions",
        Intersection((Box((0, 0), (10, 10)), Sphere((0, 0), 5))),
        "agents",
    ),
    ("relative", "a region relative to entity 42", Relative(42, Sphere((0, 0), 50)), "agents"),
    (
        "sql",
        "a SQL query, as normalised text",
        Sql("SELECT * FROM flights WHERE dep_delay > 60"),
        "flights",
    ),
    ("topic", "an MQTT topic filter", TopicFilter("sensors/+/temp"), "readings"),
    ("path", "a PPS object path with options", ObjectPath("/pps/media/.all?wait"), "media"),
    (
        "any",
        "any of several topic filters",
        AnyOf((TopicFilter("a/#"), TopicFilter("b/+"))),
        "readings",
    ),
]

VALID: list[Valid] = [
    Valid(
        "to_relay",
        "hello",
        "a subscriber's hello: version, role, name, capabilities, token",
        Hello(
            PROTOCOL_VERSION,
            "subscriber",
            name="web",
            capabilities=["float64", "fixed"],
            token="eyJ.x.y",
        ),
    ),
    Valid(
        "to_relay",
        "hello_minimal",
        "the smallest hello: defaults are omitted",
        Hello(PROTOCOL_VERSION, "subscriber"),
    ),
    *(
        Valid(
            "to_relay",
            f"subscribe_{name}",
            f"subscribe to {text}",
            _subscribe(i + 1, view, dataset),
        )
        for i, (name, text, view, dataset) in enumerate(VIEWS)
    ),
    Valid(
        "to_relay",
        "subscribe_every",
        "mode every, resuming: the resume token's keys are Columns",
        Subscribe(
            20,
            "agents",
            Box((0, 0), (1, 1)),
            rate=5.0,
            priority=2,
            mode="every",
            transform=Transform(columns=["x"], precision="fixed", quantum=0.5),
            resume=Resume(1, 41, KEYS),
            stay=True,
        ),
    ),
    Valid(
        "to_relay",
        "subscribe_relevance",
        "rate tiers by distance from the view's centre (a third of the rate beyond 20, a tenth"
        " beyond 50) and a priority from the rows changed",
        Subscribe(
            21,
            "agents",
            Sphere((0, 0), 80),
            relevance=Relevance(tiers=[Tier(20.0, 3), Tier(50.0, 10)], priority_from="changes"),
        ),
    ),
    Valid(
        "to_relay",
        "subscribe_transduced",
        "a view's stream through the window transducer: counts per cell over its last 10 ticks",
        Subscribe(
            21,
            "agents",
            Box((0, 0), (10, 10)),
            mode="every",
            transduce=Transduce(
                "window",
                {
                    "query": "SELECT floor(x) AS cell, count(*) AS n FROM history GROUP BY cell",
                    "ticks": 10,
                },
            ),
        ),
    ),
    Valid("to_relay", "unsubscribe", "end subscription 3", Unsubscribe(3)),
    Valid(
        "to_relay",
        "publish",
        "a write to an ingest dataset: upserts with NULLs, deletes by key",
        Publish(
            9,
            "flights",
            encode_columns({"id": np.array([1, 2]), "dep_delay": from_values([75.0, None])}),
            KEYS,
        ),
    ),
    Valid(
        "to_subscriber",
        "welcome",
        "a relay's welcome: the datasets and their kinds",
        Welcome(
            PROTOCOL_VERSION,
            "fanout-relay r1",
            "0123456789ab",
            {"agents": "space", "flights": "sql"},
        ),
    ),
    Valid(
        "to_subscriber",
        "subscribed",
        "subscription 1 accepted",
        Subscribed(1, "id", ["id", "x", "y"]),
    ),
    Valid(
        "to_subscriber",
        "push",
        "a full push of every column type, NULLs and a NaN",
        Push(1, 1, 41, 41, 1764390600.25, True, ROWS, encode_columns({}), encode_columns({})),
    ),
    Valid(
        "to_subscriber",
        "push_delta",
        "a delta: updated rows and left keys",
        Push(
            1,
            1,
            42,
            42,
            1764390600.35,
            False,
            encode_columns({}),
            encode_columns({"id": np.array([1]), "x": np.array([2.0])}),
            KEYS,
        ),
    ),
    Valid("to_subscriber", "no_update", "nothing changed up to tick 43", NoUpdate(1, 1, 43, 43)),
    Valid("to_subscriber", "unsubscribed", "subscription 1 is gone", Unsubscribed(1)),
    Valid(
        "to_subscriber",
        "published",
        "write 9 is durable at offsets 100..101",
        Published(9, 100, 101),
    ),
    Valid(
        "to_subscriber",
        "error",
        "a refusal naming subscription 2",
        Error("invalid_view", "unknown dataset 'x'", ref=2),
    ),
    Valid(
        "to_subscriber",
        "error_redirect",
        "a redirect with the relay to go to",
        Error("redirect", "served by r2", ref=3, location="ws://r2:7701"),
    ),
    Valid(
        "to_publisher",
        "hello_relay",
        "a reconnecting relay: resume {dataset: [epoch, seq]}",
        Hello(PROTOCOL_VERSION, "relay", name="r1", resume={"agents": (1, 41)}),
    ),
    Valid(
        "to_publisher",
        "acquire_box",
        "acquire a region primitive",
        Acquire(1, "agents", Box((0, 0), (10, 10))),
    ),
    Valid(
        "to_publisher",
        "acquire_sqlbox",
        "acquire a SQL primitive (a table and boxes of value sets)",
        Acquire(2, "flights", Sql("SELECT * FROM flights WHERE dep_delay > 60").primitives()[0]),
    ),
    Valid(
        "to_publisher",
        "acquire_entity",
        "acquire one entity's row",
        Acquire(3, "agents", Entity(42)),
    ),
    Valid(
        "to_publisher",
        "acquire_below",
        "a relay's worker to its leader: a primitive for the relays below the worker",
        Acquire(4, "agents", Box((0, 0), (10, 10)), below=True),
    ),
    Valid("to_publisher", "release", "release primitive 1", Release(1)),
    Valid(
        "to_publisher",
        "read_state",
        "read the latest rows in a box",
        ReadState(-5, "agents", Box((0, 0), (1, 1))),
    ),
    Valid("to_publisher", "curious", "ask again for seqs 40..41", Curious(-6, "agents", 1, 40, 41)),
    Valid("to_publisher", "horizon", "the relay needs seqs from 40 on", Horizon("agents", 1, 40)),
    Valid(
        "to_publisher",
        "live_writes",
        "pass the relay writes to sensors made elsewhere at once",
        LiveWrites("sensors"),
    ),
    Valid(
        "to_publisher",
        "live_writes_not_wanted",
        "no latest view here takes live writes of sensors any more",
        LiveWrites("sensors", wanted=False),
    ),
    Valid("from_publisher", "catalog", "the datasets", Catalog([AGENTS, FLIGHTS])),
    Valid(
        "from_publisher",
        "batch",
        "one micro-batch with snapshots",
        Batch(
            "agents",
            1,
            41,
            41,
            1764390600.25,
            encode_columns({"id": np.array([1]), "x": np.array([1.0]), "y": np.array([2.0])}),
            KEYS,
            [1],
        ),
    ),
    Valid(
        "from_publisher",
        "knowledge",
        "a logged micro-batch, answering curious -6",
        Knowledge(-6, "agents", 1, 40, 40, 1764390600.15, encode_columns({}), KEYS),
    ),
    Valid(
        "from_publisher",
        "state_rows",
        "authoritative rows for read_state -5",
        StateRows(
            -5,
            "agents",
            41,
            encode_columns({"id": np.array([1]), "x": np.array([0.5]), "y": np.array([0.5])}),
        ),
    ),
    Valid(
        "from_publisher",
        "dataset_state",
        "a dataset's query stopped",
        DatasetState("agents", False, reason="source lost", retry_in=5.0),
    ),
    Valid(
        "from_publisher",
        "resync",
        "a relay to a relay below: primitives 3 and 5 wait for their snapshots again",
        Resync("agents", [3, 5]),
    ),
    Valid(
        "from_publisher",
        "written",
        "a write made through another relay, logged at offsets 102-103: shown before its batch",
        Written(
            "sensors",
            102,
            103,
            encode_columns({"topic": np.array(["live/1"]), "value": np.array([1.5])}),
            encode_columns({"topic": np.array(["live/0"])}),
        ),
    ),
    Valid(
        "from_publisher",
        "pending",
        "a relay's leader to its workers: a write through another worker, not answered yet",
        Pending(
            7,
            "sensors",
            encode_columns({"topic": np.array(["live/1"]), "value": np.array([1.5])}),
        ),
    ),
    Valid(
        "from_publisher",
        "settled",
        "a relay's leader to its workers: pending write 7 logged at offsets 104-104",
        Settled(7, 104, 104),
    ),
    Valid(
        "from_publisher",
        "settled",
        "a relay's leader to its workers: pending write 8 refused (no offsets)",
        Settled(8),
    ),
    Valid(
        "from_publisher",
        "responsibility",
        "a relay's leader to its workers: the map of responsibility, one part handed over",
        Responsibility(
            "edge-a",
            256.0,
            {"edge-a": "ws://10.0.0.1:7701", "edge-b": "ws://10.0.0.2:7701"},
            assigned={"agents/3/4": "edge-b\nedge-a\n1\n"},
        ),
    ),
    Valid(
        "from_publisher",
        "responsibility",
        "a relay's leader to its workers: its lease lapsed (it serves nothing)",
        Responsibility("edge-a", 256.0, {"edge-b": "ws://10.0.0.2:7701"}, serving=False),
    ),
    Valid(
        "to_publisher",
        "worker_load",
        "a relay's worker to its leader: its subscriptions by part, what a split would warm",
        WorkerLoad(
            256.0,
            {"agents/cell:0,0": 3, "sensors/topic:plant": 1},
            {"agents/cell:0,0": "box:10,10,90,120"},
            subscriptions=4,
            pushes=1200,
            cpu=3.5,
        ),
    ),
    Valid(
        "to_publisher",
        "map_wanted",
        "a relay's worker to its leader: read the map afresh",
        MapWanted(),
    ),
]
