"""The balancer's shell (``cluster.splitting``) in a real relay (in this event loop) on a
scripted publisher and a real Redis Cluster: past its threshold, with no idle standby, it runs
``--split-command``, waits for the relay it started (a real ``fanout relay --standby`` process)
to join the map, and hands it one of its two cells, whose held view ends with a redirect there;
a command whose relay never joins is logged and counted, and nothing moves. And the weights of
the parts a relay is responsible for (``responsible``), without a relay."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Iterator

import pytest

from fanout.client import SubscriptionError, connect
from fanout.cluster import handover
from fanout.cluster.responsibility import Assignment, ResponsibilityMap, part_of
from fanout.cluster.settings import Cluster
from fanout.cluster.splitting import responsible
from fanout.testing.catalog import AGENTS
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.redis import throwaway_redis_cluster
from fanout.testing.relays import running_relay
from fanout.testing.wait import eventually
from fanout.views import Box
from fanout.wire.messages import Catalog

BOXES = [Box((10.0, 10.0), (20.0, 20.0)), Box((300.0, 10.0), (310.0, 20.0))]


@pytest.fixture(scope="module")
def registry() -> Iterator[str]:
    with throwaway_redis_cluster() as nodes:
        host, port = nodes[0]
        yield f"redis://{host}:{port}"


def settings(registry: str, command: str, wait: float) -> Cluster:
    return Cluster(
        registry,
        lease=30.0,
        split_above={"subscribers": 1.0},
        split_dwell=1.0,
        split_command=command,
        split_wait=wait,
    )


async def test_a_relay_past_its_threshold_starts_a_standby_and_splits_to_it(
    registry: str,
) -> None:
    publisher = ScriptedPublisher(Catalog([AGENTS]))
    async with serving(publisher) as url:
        command = (
            f"{sys.executable} -m fanout relay --publisher {url} --port 0 --name {{name}}"
            f" --standby --registry {registry} --registry-lease 30 --log-level warning"
        )
        config = settings(registry, command, wait=90.0)
        async with running_relay(url, name="sa", cluster=config) as (relay, relay_url):
            assert relay.balancer is not None and relay.registry is not None
            balancer = relay.balancer
            try:
                async with connect(relay_url) as subscriber:
                    views = [await subscriber.subscribe(box) for box in BOXES]
                    await eventually(lambda: balancer.splits, timeout=120, what="a split")
                    assert len(balancer.started) == 1
                    table = relay.registry.map
                    assert "sa-split-1" in table.standby
                    handed = table.received("sa-split-1")
                    assert len(handed) == 1 and handed[0] in {part_of("agents", b) for b in BOXES}
                    moved = next(v for v in views if part_of("agents", v.view) == handed[0])
                    # The standby never holds the part warm (this publisher sends no
                    # snapshot): the giver ends the part's subscriptions after handover.WAIT.
                    await eventually(
                        lambda: moved.error, timeout=handover.WAIT + 10, what="the redirect"
                    )
                    assert isinstance(moved.error, SubscriptionError)
                    assert moved.error.code == "redirect"
                    assert moved.error.location == table.members["sa-split-1"]
                    kept = next(v for v in views if v is not moved)
                    assert kept.error is None and relay.core.stats()["subscriptions"] == 1
            finally:
                for process in balancer.started:  # the shell and the relay it started
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGTERM)
                    await asyncio.wait_for(process.wait(), 30)


async def test_a_split_command_whose_relay_never_joins_is_logged_and_nothing_moves(
    registry: str, caplog: pytest.LogCaptureFixture
) -> None:
    publisher = ScriptedPublisher(Catalog([AGENTS]))
    caplog.set_level(logging.ERROR, "fanout.cluster.splitting")
    async with (
        serving(publisher) as url,
        running_relay(url, name="sb", cluster=settings(registry, "true", wait=1.0)) as (relay, at),
    ):
        assert relay.balancer is not None and relay.registry is not None
        await eventually(  # the standby of the test before has left: none is idle
            relay.registry.beat, lambda read: not read.standby, timeout=30, what="no standby"
        )
        async with connect(at) as subscriber:
            views = [await subscriber.subscribe(box) for box in BOXES]
            await eventually(lambda: relay.balancer.failures, timeout=60, what="a failed split")  # type: ignore[union-attr]
            assert relay.balancer.splits == 0 and not relay.registry.map.assigned
            assert "did not join the map as a standby named sb-split-1" in caplog.text
            assert all(view.error is None for view in views)


def test_a_relay_is_responsible_for_the_parts_it_owns_weighed_with_the_relays_below() -> None:
    """``responsible``: the parts a relay owns among its subscriptions' and the primitives
    pinned for relays below, each weighed by how many hold it; the others' parts left out."""
    mine, theirs = (part_of("agents", box) for box in BOXES)
    table = ResponsibilityMap(
        {"a": "ws://a", "b": "ws://b"},
        assigned={mine: Assignment("a", "b"), theirs: Assignment("b", "a")},
    )
    held = [("agents", BOXES[0]), ("agents", BOXES[0]), ("agents", BOXES[1])]
    pinned = {"agents": {Box((11.0, 11.0), (19.0, 19.0)): 3, BOXES[1]: 1}}
    assert responsible(table, "a", held, pinned) == {mine: 5.0}
    assert responsible(table, "b", held, pinned) == {theirs: 2.0}
    assert responsible(table, "a", held, {}) == {mine: 2.0}  # the redirect policy's weights
    assert responsible(ResponsibilityMap({}), "a", held, pinned) == {}  # nobody owns anything
