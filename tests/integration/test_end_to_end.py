"""The thin path end to end: Spark publisher -> relay -> subscribers, checked against the state.

Every process is real (a Spark publisher and a relay started with the ``fanout`` command, real
sockets on loopback); each subscriber's rows are compared with the publisher's authoritative
state inside its view at the tick of its last update.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio
from websockets.asyncio.client import connect as ws_connect

from fanout.auth import issue
from fanout.client import SubscriptionError, connect
from fanout.client.publisher import open_reader
from fanout.launch import Child, Children
from fanout.metrics import scrape
from fanout.testing.wait import eventually
from fanout.views import Box, Relative, Sphere
from fanout.views.entity import Entity
from fanout.wire import codec
from fanout.wire.messages import PROTOCOL_VERSION, Error, Hello, Welcome
from fanout.wire.options import Relevance, Tier

from .conftest import settle

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]


def expected_rows(state: dict[str, np.ndarray], view: Box | Sphere) -> dict[int, dict]:
    inside = np.flatnonzero(view.match(state["x"], state["y"]))
    return {
        int(state["id"][i]): {name: values[i].item() for name, values in state.items()}
        for i in inside
    }


async def test_two_subscribers_see_exactly_the_publishers_state(
    publisher: Child, relay: Child
) -> None:
    async with connect(relay.url) as first, connect(relay.url) as second:
        box = await first.subscribe(Box((200, 200), (450, 450)))
        sphere = await second.subscribe(Sphere((400, 400), 120.0), rate=5.0)
        await settle(box, 3)
        await settle(sphere, 2)
        # move one view; its next updates are deltas that must land on the new region exactly
        moved = Box((600, 100), (800, 300))
        await box.change(moved)
        await settle(box, 3)
        async with open_reader(publisher.url) as reader:
            for view, region in ((box, moved), (sphere, Sphere((400, 400), 120.0))):
                tick, rows = view.tick, dict(view.rows)
                _, state = await reader.read("agents", region, tick)
                assert rows == expected_rows(state, region)
                assert rows, "a view of a populated region should not be empty"
        assert box.dropped == 0


async def test_a_tiered_view_holds_the_views_keys_and_its_near_rows_exactly(
    publisher: Child, relay: Child
) -> None:
    box = Box((200, 200), (450, 450))
    relevance = Relevance(tiers=[Tier(60.0, 3), Tier(110.0, 10)], priority_from="nearest")
    async with connect(relay.url) as subscriber, open_reader(publisher.url) as reader:
        view = await subscriber.subscribe(box, relevance=relevance)
        await settle(view, 4, timeout=240.0)  # a loaded machine's first snapshot takes long
        tick, rows = view.tick, dict(view.rows)
        _, state = await reader.read("agents", box, tick)
    expected = expected_rows(state, box)
    assert set(rows) == set(expected)  # entering and leaving are never held back
    near = [k for k, row in expected.items() if math.dist((row["x"], row["y"]), (325, 325)) <= 60]
    assert near and all(rows[k] == expected[k] for k in near)  # sent at every push


async def test_the_publisher_and_the_relay_answer_get_metrics(
    publisher: Child, relay: Child
) -> None:
    async with connect(relay.url) as subscriber:
        view = await subscriber.subscribe(Box((200, 200), (450, 450)))
        await settle(view, 2)
        relay_side = await asyncio.to_thread(scrape, relay.url)
        publisher_side = await asyncio.to_thread(scrape, publisher.url)
    assert relay_side["fanout_relay_subscriptions"] >= 1
    assert relay_side["fanout_relay_pushes_total"] >= 2
    assert relay_side["fanout_relay_primitives"] >= 1
    assert publisher_side["fanout_publisher_relays"] >= 1
    assert publisher_side['fanout_publisher_micro_batches_total{dataset="agents"}'] >= 2
    assert publisher_side['fanout_publisher_tick{dataset="agents"}'] > 0
    assert publisher_side['fanout_publisher_mirror_rows{dataset="agents"}'] > 0
    assert publisher_side['fanout_publisher_stage_ms{dataset="agents",stage="state+match"}'] > 0
    relays = [k for k in publisher_side if k.startswith("fanout_publisher_relay_bytes_sent")]
    assert relays and all(publisher_side[k] > 0 for k in relays)
    # Both give glibc's free pages back every 10 s (``fanout.allocator``, --trim-every).
    for process in (publisher, relay):
        trims = functools.partial(scrape, process.url)
        await eventually(
            trims, lambda m: m["fanout_malloc_trim_seconds_count"] >= 1, timeout=15, in_thread=True
        )


async def test_a_subscriber_follows_an_agent_with_a_relative_sphere(
    publisher: Child, relay: Child
) -> None:
    near = Relative(7, Sphere((0, 0), 120.0))
    async with connect(relay.url) as subscriber, open_reader(publisher.url) as reader:
        view = await subscriber.subscribe(near)
        positions = []
        for _ in range(2):  # the agent moves between the checks: so does the view
            await settle(view, 3, timeout=240.0)  # first finds the agent, then its region
            tick, rows = view.tick, dict(view.rows)
            _, agent = await reader.read("agents", Entity(7), tick)
            position = (float(agent["x"][0]), float(agent["y"][0]))
            region = near.resolve(position)
            _, state = await reader.read("agents", region, tick)
            assert rows == expected_rows(state, region)
            assert 7 in rows
            positions.append(position)
        assert positions[0] != positions[1]
        missing = await subscriber.subscribe(Relative(999_999, Sphere((0, 0), 50.0)))
        with pytest.raises(SubscriptionError, match="does not exist") as failure:
            await settle(missing, 1)
        assert failure.value.code == "entity_not_held"


async def test_cli_subscribe_takes_a_relative_view(relay: Child) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "fanout",
        "subscribe",
        "--relay",
        relay.url,
        "--view",
        "rel:3:sphere:0,0,150",
        "--json",
        "--count",
        "2",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    lines = [json.loads(line) for line in out.decode().splitlines()]
    assert lines[0]["full"] is True
    assert 3 in {row["id"] for row in lines[0]["entered"]}


async def test_garbage_to_the_publisher_gets_an_error_and_it_keeps_serving(
    publisher: Child, relay: Child
) -> None:
    async with ws_connect(publisher.url) as websocket:
        await websocket.send(codec.encode(Hello(PROTOCOL_VERSION, "reader")))
        assert isinstance(codec.from_publisher().decode(await websocket.recv()), Welcome)
        await websocket.recv()  # the catalog
        await websocket.send(b"\xde\xad\xbe\xef")
        error = codec.from_publisher().decode(await websocket.recv())
        assert isinstance(error, Error)
        assert error.code == "protocol"
    async with connect(relay.url) as subscriber:
        view = await subscriber.subscribe(Box((0, 0), (500, 500)))
        await settle(view, 2)
        assert view.rows


async def test_reading_an_unknown_tick_is_a_clear_error(publisher: Child, relay: Child) -> None:
    async with open_reader(publisher.url) as reader:
        _, rows = await reader.read("agents", Box((0, 0), (1000, 1000)))
        assert len(rows["id"]) == 2000
        with pytest.raises(
            SubscriptionError, match=r"older than the state kept|not where a micro-batch ended"
        ):
            await reader.read("agents", Box((0, 0), (10, 10)), tick=1)
        with pytest.raises(SubscriptionError, match="unknown dataset"):
            await reader.read("nope", Box((0, 0), (10, 10)))


async def test_cli_subscribe_prints_json_lines(relay: Child) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "fanout",
        "subscribe",
        "--relay",
        relay.url,
        "--box",
        "0,0,300,300",
        "--json",
        "--count",
        "2",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    lines = [json.loads(line) for line in out.decode().splitlines()]
    assert len(lines) == 2
    assert lines[0]["full"] is True
    assert all({"tick", "seq", "entered", "updated", "left"} <= set(line) for line in lines)
    assert all(0 <= row["x"] <= 300 for row in lines[0]["entered"])


SECRET = "end-to-end-secret-" + "s" * 32


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def guarded(children: Children, publisher: Child, tmp_path: Path) -> AsyncIterator[Child]:
    """A second relay on the same publisher that checks tokens (``--auth-key-file``)."""
    secret = tmp_path / "relay-secret"
    secret.write_text(SECRET)
    child = await children.start(
        "relay",
        ["--publisher", publisher.url, "--port", "0", "--auth-key-file", str(secret)],
        tmp_path / "guarded-relay.log",
    )
    try:
        yield child
    finally:
        await child.stop()


async def test_a_sphere_rule_serves_a_box_view_within_the_sphere(
    publisher: Child, guarded: Child
) -> None:
    """The effective view is the box intersected with the sphere: at the tick of its last
    update the subscriber holds exactly the publisher's rows inside both (plain comparisons)."""
    cx, cy, r = 500.0, 500.0, 150.0
    ruled = issue("HS256", SECRET, ["subscriber"], rules={"agents": f"sphere:{cx},{cy},{r}"})
    box = Box((400, 300), (900, 900))
    async with connect(guarded.url, token=ruled) as client:
        view = await client.subscribe(box)
        await settle(view, 3)
        async with open_reader(publisher.url) as reader:
            tick, rows = view.tick, dict(view.rows)
            _, state = await reader.read("agents", box, tick)
        in_both = box.match(state["x"], state["y"]) & (
            np.hypot(state["x"] - cx, state["y"] - cy) <= r
        )
        inside = {
            int(state["id"][i]): {name: values[i].item() for name, values in state.items()}
            for i in np.flatnonzero(in_both)
        }
        assert rows == inside
        assert rows, "the box and the sphere share a populated area"
        assert len(inside) < len(expected_rows(state, box)), "the rule narrowed nothing"
        assert all(math.hypot(row["x"] - cx, row["y"] - cy) <= r for row in rows.values())
