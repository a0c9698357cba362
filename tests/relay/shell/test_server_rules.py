"""Tokens and access rules at a real relay (real sockets), against a scripted publisher.

The relay's upstream holds more than one subscriber may see: a subscriber whose token carries
rules gets its view intersected with them, another without rules the whole view; a view of a
dataset, or a join of a table, the rules do not grant is refused; every refusal is the
refused subscription's alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import pytest

from fanout.auth import AuthConfig, issue
from fanout.client import HandshakeRefused, SubscriptionError, connect
from fanout.relay.config import Planning
from fanout.relay.core.planner import Policy
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.relays import running_relay
from fanout.testing.wait import eventually
from fanout.views import Box
from fanout.views.sql import parse as sql
from fanout.wire.messages import Catalog, DatasetInfo, Publish

SECRET = "relay-secret-" + "k" * 32
AGENTS = DatasetInfo("agents", "id", {"id": "<i8", "x": "<f8", "y": "<f8"}, "space", ["x", "y"])
ORDERS = DatasetInfo("orders", "id", {"id": "<i8", "tenant": "str"}, "sql", [])
USERS = DatasetInfo("users", "id", {"id": "<i8", "tenant": "str"}, "sql", [])


def token(**rules: str | list[str]) -> str:
    return issue("HS256", SECRET, ["subscriber"], rules=rules or None)


@contextlib.asynccontextmanager
async def deployment() -> AsyncIterator[tuple[ScriptedPublisher, str]]:
    publisher = ScriptedPublisher(Catalog([AGENTS, ORDERS, USERS]))
    async with (
        serving(publisher) as url,
        running_relay(
            url, planning=Planning(Policy(widen="exact")), auth=AuthConfig("HS256", SECRET)
        ) as (
            _,
            relay_url,
        ),
    ):
        yield publisher, relay_url


async def test_a_subscriber_sees_its_view_within_its_rules_and_another_sees_all_of_it() -> None:
    async with (
        deployment() as (publisher, url),
        connect(url, token=token(agents="box:0,0,5,5")) as ruled,
        connect(url, token=token()) as free,
    ):
        view = Box((0, 0), (10, 10))
        mine = await ruled.subscribe(view)
        acquire = await publisher.next_acquire()
        assert acquire.view == Box((0, 0), (5, 5)), "only the effective view is acquired"
        theirs = await free.subscribe(view)
        rows = {"id": [1, 2, 3], "x": [1.0, 4.5, 8.0], "y": [1.0, 5.0, 8.0]}

        async def fed() -> bool:  # snapshots of whatever was acquired, until both are served
            await publisher.send(rows, snapshots=publisher.take_fresh())
            return len(theirs.rows) == 3 and len(mine.rows) == 2

        await eventually(fed)
        assert sorted(mine.rows) == [1, 2]
        await publisher.send({"id": [1, 4], "x": [9.0, 2.0], "y": [9.0, 2.0]}, tick=5)
        await eventually(lambda: sorted(mine.rows) == [2, 4] and len(theirs.rows) == 4)


async def test_what_the_rules_do_not_grant_is_refused_and_others_are_served() -> None:
    async with deployment() as (publisher, url), connect(url, token=token()) as other:
        served = await other.subscribe(Box((0, 0), (10, 10)))
        acquire = await publisher.next_acquire()
        await publisher.send({"id": [1], "x": [1.0], "y": [1.0]}, snapshots=[acquire.prim])
        await served.wait_updates(1)
        refusals = [
            ({"agents": "box:0,0,5,5"}, "orders", sql("SELECT * FROM orders"), "'orders'"),
            (
                {"orders": "tenant = 'a'"},
                "orders",
                sql("SELECT o.id FROM orders o JOIN users u ON o.id = u.id"),
                "grants no rows of dataset 'users'",
            ),
            ({"agents": "box:20,20,30,30"}, "agents", Box((0, 0), (5, 5)), "outside"),
            ({"agents": "box:0,0"}, "agents", Box((0, 0), (5, 5)), "rule 1 on 'agents'"),
        ]
        for rules, dataset, view, says in refusals:
            async with connect(url, token=token(**rules)) as ruled:
                with pytest.raises(SubscriptionError) as refused:
                    await ruled.subscribe(view, dataset=dataset)
                assert refused.value.code == "forbidden" and says in str(refused.value)
        await publisher.send({"id": [1], "x": [2.0], "y": [2.0]}, tick=3)
        await eventually(lambda: served.rows[1]["x"] == 2.0)


async def test_without_a_token_nothing_is_read() -> None:
    async with deployment() as (_, url):
        with pytest.raises(HandshakeRefused) as refused:
            async with connect(url):
                pass
        assert refused.value.code == "unauthorized"
        await asyncio.sleep(0)


async def test_a_token_with_rules_is_told_only_of_the_datasets_they_name() -> None:
    import httpx

    async with (
        deployment() as (_, url),
        connect(url, token=token(agents="box:0,0,5,5")) as ruled,
        connect(url, token=token()) as free,
    ):
        assert set(ruled.datasets) == {"agents"}
        assert set(free.datasets) == {"agents", "orders", "users"}
        base = url.replace("ws://", "http://")
        headers = {"Authorization": f"Bearer {token(orders='tenant = 1')}"}
        async with httpx.AsyncClient(timeout=10) as client:
            described = (await client.get(f"{base}/v1/datasets", headers=headers)).json()
        assert [d["name"] for d in described["datasets"]] == ["orders"]


async def test_fanout_subscribe_presents_its_token_file(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from fanout.cli.main import main

    async with deployment() as (publisher, url):
        argv = ["subscribe", "--relay", url, "--box", "0,0,10,10", "--count", "1", "--json"]
        refused = await asyncio.to_thread(main, argv)
        assert refused == 1
        assert "unauthorized: a token is required" in capsys.readouterr().err
        token_file = tmp_path / "ana.token"
        token_file.write_text(token(agents="box:0,0,5,5") + "\n")
        running = asyncio.create_task(
            asyncio.to_thread(main, [*argv, "--token-file", str(token_file)])
        )

        async def fed() -> bool:
            await publisher.send(
                {"id": [1, 2], "x": [1.0, 8.0], "y": [1.0, 8.0]}, snapshots=publisher.take_fresh()
            )
            return running.done()

        await eventually(fed)
        assert running.result() == 0
        (line,) = capsys.readouterr().out.splitlines()
        assert [row["id"] for row in json.loads(line)["entered"]] == [1]  # 2 is outside the rules


async def test_only_a_token_granting_producer_may_write_through_the_relay() -> None:
    async with deployment() as (_, url), connect(url, token=token()) as reader:
        with pytest.raises(SubscriptionError, match="producer role") as refused:
            await asyncio.wait_for(reader.publish("orders", [{"id": 1, "tenant": "a"}]), 10)
        assert refused.value.code == "forbidden"
    seen: list[object] = []
    publisher = ScriptedPublisher(Catalog([AGENTS, ORDERS, USERS]), on_frame=seen.append)
    writer_token = issue("HS256", SECRET, ["subscriber", "producer"])
    async with (
        serving(publisher) as upstream,
        running_relay(upstream, auth=AuthConfig("HS256", SECRET)) as (_, url),
        connect(url, token=writer_token) as writer,
    ):
        writing = asyncio.create_task(writer.publish("orders", [{"id": 1, "tenant": "a"}]))
        forwarded = await eventually(
            lambda: [f for f in seen if isinstance(f, Publish)], what="the write forwarded"
        )
        assert forwarded[0].dataset == "orders"
        writing.cancel()
