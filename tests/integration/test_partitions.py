"""Partitions, not crashes: a relay's link to its publisher goes silent while both ends live
(``testing.proxy``), with real processes on loopback (issue 45, item 3).

A Spark publisher and a relay dialing it through a proxy; ``every``-mode subscribers hold box
views on the relay while the link is partitioned one way or both. A short partition costs only
time: the link stays, and what was held flows on. One longer than twice the relay's upstream
keepalive (2 s here) is given up by the relay, which connects again once healed and resumes;
its subscribers stay connected throughout. Each subscriber's updates are audited against the
publisher's log: nothing lost, duplicated or reordered.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from fanout.launch import Child, Children
from fanout.testing.followers import Follower, check, logged
from fanout.testing.ports import LOOPBACK
from fanout.testing.proxy import Proxy, Way, proxy
from fanout.views import Box

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

BOXES = [Box((100, 100), (300, 300)), Box((600, 0), (800, 250))]
KEEPALIVE = 2.0


@dataclass
class Deployment:
    publisher: Child
    relay: Child
    link: Proxy  # between the relay and the publisher
    log: Path  # the publisher's


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def deployment(children: Children, tmp_path: Path) -> AsyncIterator[Deployment]:
    args = ["--port", "0", "--state-dir", str(tmp_path / "publisher"), "--agents", "2000"]
    publisher = await children.start(
        "publisher", [*args, "--log-level", "info"], tmp_path / "publisher.log"
    )
    port = int(publisher.url.rsplit(":", 1)[1])
    async with proxy((LOOPBACK, port)) as link:
        args = ["--publisher", f"ws://{link.address}", "--port", "0", "--name", "p"]
        args += ["--upstream-keepalive", str(KEEPALIVE), "--log-level", "info"]
        relay = await children.start("relay", args, tmp_path / "relay.log")
        try:
            yield Deployment(publisher, relay, link, tmp_path / "publisher" / "log.db")
        finally:
            await relay.stop()  # before the proxy goes: the scope stops the publisher


async def followed(deployment: Deployment) -> list[Follower]:
    followers = [Follower(box) for box in BOXES]
    for follower in followers:
        await follower.attach(deployment.relay.url)
    await asyncio.gather(*(f.received(3) for f in followers))
    return followers


async def audited(deployment: Deployment, followers: list[Follower]) -> None:
    """Wait until three more seqs came, then check nobody was dropped and the audit is clean."""
    target = logged(deployment.log, followers[0]) + 3
    await asyncio.gather(*(f.reached(target) for f in followers))
    assert [f.failures for f in followers] == [[]] * len(followers), "subscribers were dropped"
    for follower in followers:
        await follower.detach()
        check(follower, deployment.log)


async def test_a_short_partition_of_the_upstream_costs_time_and_keeps_the_link(deployment):
    followers = await followed(deployment)
    link, dialed = deployment.link, deployment.link.connections
    link.partition()
    await asyncio.sleep(KEEPALIVE / 2)
    assert link.waiting > 0 or link.down.flowing.is_set() is False  # batches wait in the link
    link.heal()
    await audited(deployment, followers)
    assert link.connections == dialed, "the relay dialed again across a short partition"


@pytest.mark.parametrize("way", ["both", "down", "up"])
async def test_a_long_partition_is_given_up_then_resumed_with_every_subscriber_held(
    deployment, way: Way
):
    followers = await followed(deployment)
    link, dialed = deployment.link, deployment.link.connections
    link.partition(way)
    await asyncio.sleep(KEEPALIVE * 4)  # the relay's pings go unanswered: it gives the link up
    link.heal()
    await audited(deployment, followers)
    assert link.connections > dialed, "the relay never gave the silent link up"
