"""A relay of two workers in a map of responsibility (``fanout relay --workers 2 --registry``,
issue 39): each worker redirects new subscriptions by its leader's map, ends the held ones a
relay joining the map takes, and has its leader read the map afresh before it redirects an HTTP
stream; the relay splits on the load of all its workers; its figures are theirs summed. Real
relays as a user starts them, a real Redis Cluster; the publisher is the scripted one. A lapsed
lease and splits with Spark are tested in ``tests/integration`` (``test_partitions.py``,
``test_split.py``: their relays run two workers each on CI)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fanout.client import SubscriptionError
from fanout.cluster.registry import connect as registry_client
from fanout.cluster.responsibility import ResponsibilityMap, part_of
from fanout.launch import running
from fanout.metrics import scrape
from fanout.testing.catalog import catalog, sensors
from fanout.testing.clusterview import assignments, members_seen
from fanout.testing.ports import free_port
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.redis import throwaway_redis_cluster
from fanout.testing.wait import eventually
from fanout.views import to_text
from fanout.views.topic import parse as topic

from .deployments import next_update
from .test_workers_live import _on_two_workers

pytestmark = [pytest.mark.integration, pytest.mark.no_spark_publisher]

LEASE = 2.0
#: Topic filters of sixteen parts (``sensors/topic:tN``), spread over the relays by the map.
FILTERS = [f"t{i}/#" for i in range(16)]


@pytest.fixture(scope="module")
def registry() -> Iterator[str]:
    with throwaway_redis_cluster() as nodes:
        host, port = nodes[0]
        yield f"redis://{host}:{port}"


def _relay(upstream: str, registry: str, name: str, *extra: str) -> list[str]:
    args = ["--publisher", upstream, "--port", "0", "--name", name, "--workers", "2"]
    args += ["--workers-port", str(free_port()), "--registry", registry]
    return [*args, "--registry-lease", str(LEASE), "--log-level", "info", *extra]


async def _once(url: str, name: str, what: str, timeout: float = 30) -> dict[str, float]:
    """The relay's figures at ``url`` once its counter ``name`` is 1."""
    return await eventually(
        lambda: scrape(url), lambda now: now[name] == 1, in_thread=True, timeout=timeout, what=what
    )


async def _ended(view: Any, timeout: float = 20.0) -> SubscriptionError:
    """The error ``view`` ended with (its updates read until then)."""

    async def read() -> None:
        async for _ in view:
            pass

    with pytest.raises(SubscriptionError) as ended:
        await asyncio.wait_for(read(), timeout)
    return ended.value


async def test_each_worker_redirects_by_the_map_and_ends_what_a_joining_relay_takes(
    registry: str, tmp_path: Path
) -> None:
    publisher = ScriptedPublisher(catalog(sensors()))
    async with serving(publisher) as upstream, contextlib.AsyncExitStack() as stack:
        a = await stack.enter_async_context(
            running("relay", _relay(upstream, registry, "a"), tmp_path / "a.log")
        )
        on_workers = await _on_two_workers(stack, a.url)
        # Alone in the map, relay a serves every part, on each of its workers.
        views = {}
        for i, text in enumerate(FILTERS):
            views[text] = await on_workers[i % 2].subscribe(topic(text), dataset="sensors")
        b = await stack.enter_async_context(
            running("relay", _relay(upstream, registry, "b"), tmp_path / "b.log")
        )
        both = ResponsibilityMap({"a": a.url, "b": b.url})
        taken = [t for t in FILTERS if both.owner_of("sensors", topic(t)).name == "b"]
        kept = [t for t in FILTERS if t not in taken]
        assert taken and kept, "the map gives each relay some parts"
        assert {i % 2 for i, t in enumerate(FILTERS) if t in taken} == {0, 1}, "on each worker"
        await members_seen([a, b], 2)

        # The held subscriptions b took end with a redirect there, on either worker ...
        for text in taken:
            error = await _ended(views[text])
            assert (error.code, error.location) == ("redirect", b.url), text
        # ... and those a kept are served on.
        rows = {"topic": [f"t{i}/x" for i in range(16)], "value": [float(i) for i in range(16)]}
        await publisher.send(rows, snapshots=publisher.take_fresh(), tick=1)
        for text in kept:
            update = await next_update(views[text], 20)
            assert update.full and set(views[text].rows) == {text.replace("#", "x")}

        # New subscriptions of b's parts are redirected there by either worker; one asking
        # to stay is served here.
        for subscriber in on_workers:
            with pytest.raises(SubscriptionError) as redirected:
                await subscriber.subscribe(topic(taken[0]), dataset="sensors")
            assert (redirected.value.code, redirected.value.location) == ("redirect", b.url)
        await on_workers[0].subscribe(topic(taken[1]), dataset="sensors", stay=True)  # no error

        # An HTTP stream of b's part: the worker has its leader read the map, then redirects.
        http = "http" + a.url.removeprefix("ws")
        params = {"dataset": "sensors", "view": to_text(topic(taken[0]))}
        async with httpx.AsyncClient(timeout=20) as client:
            answer = await client.get(f"{http}/v1/subscribe", params=params)
        assert answer.status_code == 307 and answer.headers["location"].startswith(
            "http" + b.url.removeprefix("ws")
        )

        counts = await _once(a.url, "fanout_relay_map_confirmed_total", "the redirect confirmed")
        # Summed over the workers: two WebSocket redirects and the HTTP stream's; the
        # registry's figures are the leader's, not one per process.
        assert counts["fanout_relay_redirected_total"] == 3
        assert counts["fanout_relay_map_unconfirmed_total"] == 0
        assert counts["fanout_relay_registry_members"] == 2
        assert counts["fanout_relay_workers"] == 2


async def test_a_relay_of_workers_splits_on_the_load_of_all_its_workers(
    registry: str, tmp_path: Path
) -> None:
    """Ten subscriptions over two workers, five each: only their sum passes the threshold of
    seven, so the split is the leader weighing every worker's load."""
    publisher = ScriptedPublisher(catalog(sensors()))
    splitting = ["--split-above", "subscribers=7", "--merge-below", "subscribers=3"]
    splitting += ["--split-dwell", "2"]
    async with serving(publisher) as upstream, contextlib.AsyncExitStack() as stack:
        giver = await stack.enter_async_context(
            running("relay", [*_relay(upstream, registry, "g", *splitting)], tmp_path / "g.log")
        )
        standby = await stack.enter_async_context(
            running(
                "relay",
                [*_relay(upstream, registry, "s", *splitting), "--standby"],
                tmp_path / "s.log",
            )
        )
        await members_seen([giver, standby], 2)
        on_workers = await _on_two_workers(stack, giver.url)
        views = {}
        for i, text in enumerate(FILTERS[:10]):
            views[text] = await on_workers[i % 2].subscribe(topic(text), dataset="sensors")
        counts = await _once(giver.url, "fanout_relay_splits_total", "the giver to split", 60)
        assert counts["fanout_relay_load_subscribers"] == 10  # both workers' subscriptions
        # The parts handed over take their subscriptions to the standby, on either worker.
        redis = registry_client(registry)
        try:
            handed = await assignments(redis)
        finally:
            await redis.aclose()
        moved = [t for t in views if part_of("sensors", topic(t)) in handed]
        assert 0 < len(moved) < len(views)
        assert {FILTERS.index(text) % 2 for text in moved} == {0, 1}, "on each worker"
        assert {held.member for held in handed.values()} == {"s"}
        for error in await asyncio.gather(*(_ended(views[text]) for text in moved)):
            assert (error.code, error.location) == ("redirect", standby.url)
