"""Partitions, not crashes: a relay's link to its upstream goes silent while both ends live
(``testing.proxy``), with real processes on loopback (issue 45, item 3).

A Spark publisher and a relay dialing it through a proxy, and a tier: a mid relay on the
publisher and an edge relay dialing the mid relay through a proxy (``--upstream``).
``every``-mode subscribers hold box views on the relay (or the edge) while its link is
partitioned one way or both. A short partition costs only time: the link stays, and what was
held flows on. One longer than twice the relay's upstream keepalive (2 s here) is given up by the
relay, which connects again once healed and resumes; its subscribers stay connected throughout.
Each subscriber's updates are audited against the publisher's log: nothing lost, duplicated or
reordered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
import pytest_asyncio

from fanout.client import SubscriptionError, connect
from fanout.cluster.responsibility import ResponsibilityMap
from fanout.launch import Child, Children
from fanout.testing.clusterview import Follower as MovingFollower
from fanout.testing.clusterview import audit_followers, members_seen, metric, started_together
from fanout.testing.followers import Follower, check, logged
from fanout.testing.ports import LOOPBACK
from fanout.testing.proxy import Proxy, Way, proxy
from fanout.testing.redis import cluster_ports, throwaway_redis_cluster
from fanout.testing.wait import eventually
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
    mid: Child  # a mid relay on the publisher, directly
    edge: Child  # a relay below it (``--upstream``)
    tier: Proxy  # between the edge and the mid relay


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
        args = ["--publisher", publisher.url, "--port", "0", "--name", "mid", "--serve-relays"]
        mid = await children.start("relay", [*args, "--log-level", "info"], tmp_path / "mid.log")
        async with proxy((LOOPBACK, int(mid.url.rsplit(":", 1)[1]))) as tier:
            args = ["--upstream", f"ws://{tier.address}", "--port", "0", "--name", "edge"]
            args += ["--upstream-keepalive", str(KEEPALIVE), "--log-level", "info"]
            edge = await children.start("relay", args, tmp_path / "edge.log")
            log = tmp_path / "publisher" / "log.db"
            try:
                yield Deployment(publisher, relay, link, log, mid, edge, tier)
            finally:  # before the proxies go: the scope stops the others
                await edge.stop()
                await relay.stop()


async def followed(deployment: Deployment, at: Child | None = None) -> list[Follower]:
    """``every`` subscribers of ``at`` (the relay on the publisher unless told)."""
    followers = [Follower(box) for box in BOXES]
    for follower in followers:
        await follower.attach((at or deployment.relay).url)
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
    # The relay's pings go unanswered: it gives the link up and dials again (the proxy takes
    # the new connection, which hangs until the heal).
    await eventually(lambda: link.connections > dialed, timeout=KEEPALIVE * 10)
    link.heal()
    await audited(deployment, followers)
    assert link.connections > dialed, "the relay never gave the silent link up"


# -- a tier: the edge relay loses its mid relay while its subscribers stay ------------------


async def test_a_short_partition_between_tiers_costs_the_edges_subscribers_time_only(
    deployment,
):
    followers = await followed(deployment, deployment.edge)
    tier, dialed = deployment.tier, deployment.tier.connections
    tier.partition()
    await asyncio.sleep(KEEPALIVE / 2)
    tier.heal()
    await audited(deployment, followers)
    assert tier.connections == dialed, "the edge dialed its mid relay again across a short one"


@pytest.mark.parametrize("way", ["both", "down", "up"])
async def test_an_edge_that_loses_its_mid_relay_holds_its_subscribers_and_resumes(
    deployment, way: Way
):
    followers = await followed(deployment, deployment.edge)
    tier, dialed = deployment.tier, deployment.tier.connections
    tier.partition(way)
    # The edge's pings go unanswered: it gives the link up and dials again.
    await eventually(lambda: tier.connections > dialed, timeout=KEEPALIVE * 10)
    tier.heal()
    await audited(deployment, followers)
    assert tier.connections > dialed, "the edge never gave the silent link up"


# -- a relay of a map of responsibility loses Redis while it still reaches the rest ---------

NAMES = ("m0", "m1", "m2")
LEASE = 2.0
#: One box in each of twelve cells of the map's 256-unit grid.
CELLS = [Box((x + 60, y + 60), (x + 190, y + 190)) for x in (0, 256, 512, 768) for y in (0, 256)]


@dataclass
class MapCluster:
    relays: list[Child]
    links: list[Proxy]  # one in front of each Redis node: every relay dials the nodes there
    logs: list[Path]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(
    children: Children, deployment: Deployment, tmp_path: Path
) -> AsyncIterator[MapCluster]:
    """Three relays in a map kept in a Redis Cluster whose nodes announce proxies' ports."""
    ports = cluster_ports(3)
    async with contextlib.AsyncExitStack() as stack:
        links = [await stack.enter_async_context(proxy((LOOPBACK, port))) for port in ports]
        announced = throwaway_redis_cluster(ports=ports, announce=[link.port for link in links])
        await asyncio.to_thread(stack.enter_context, announced)  # its checks dial the proxies
        logs = [tmp_path / f"relay-{name}.log" for name in NAMES]
        starting = []
        for name, log in zip(NAMES, logs, strict=True):
            args = ["--publisher", deployment.publisher.url, "--port", "0", "--name", name]
            args += ["--registry", f"redis://{links[0].address}", "--grace", "1"]
            args += ["--registry-lease", str(LEASE), "--log-level", "info"]
            starting.append(children.start("relay", [*args, "--log-format", "json"], log))
        relays = await stack.enter_async_context(started_together(*starting))
        yield MapCluster(relays, links, logs)


def records(log: Path, says: str) -> list[tuple[float, str]]:
    """(time, message) of the JSON log records of ``log`` whose message starts with ``says``."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{") and (entry := json.loads(line))["message"].startswith(says):
            found.append((datetime.fromisoformat(entry["time"]).timestamp(), entry["message"]))
    return found


async def test_a_relay_that_loses_redis_serves_at_most_its_lease_then_rejoins(
    cluster: MapCluster, deployment: Deployment
) -> None:
    relays = cluster.relays
    await members_seen(relays, len(NAMES))
    owners = ResponsibilityMap({n: c.url for n, c in zip(NAMES, relays, strict=True)})
    named = [owners.owner_of("agents", box).name for box in CELLS]
    name = max(NAMES, key=named.count)
    victim, log = relays[NAMES.index(name)], cluster.logs[NAMES.index(name)]
    survivors = [relay for relay in relays if relay is not victim]
    mine = [box for box, owner in zip(CELLS, named, strict=True) if owner == name][:2]
    followers = [MovingFollower(box) for box in mine]
    for i, follower in enumerate(followers):  # entering at the others, sent to the victim
        await follower.attach(survivors[i % 2].url)
        assert follower.relay == victim.url
    await asyncio.gather(*(f.reached(f.updates[-1].seq + 3 if f.updates else 3) for f in followers))
    isolated = time.time()
    for link in cluster.links:
        link.isolate(victim.process.pid)  # the victim alone loses Redis
    # Within its lease it stops serving: its subscribers are sent to the map without it ...
    await eventually(
        lambda: metric(victim.url, "fanout_relay_registry_serving"),
        lambda serving: serving == 0,
        timeout=LEASE + 10,
        what="the victim to stop serving",
    )
    others = {relay.url for relay in survivors}
    await eventually(
        lambda: [follower.serving() for follower in followers],
        lambda now: set(now) <= others,
        timeout=30,
        what="the victim's subscribers at the others",
    )
    # ... and takes none of its parts again, even asked to stay.
    async with connect(victim.url) as direct:
        with pytest.raises(SubscriptionError) as refused:
            await direct.subscribe(mine[0], stay=True)
    assert refused.value.code == "redirect" and refused.value.location in others
    await members_seen(survivors, len(NAMES) - 1)  # its lease ran out in Redis too
    await asyncio.sleep(LEASE)
    healed = time.time()
    for link in cluster.links:
        link.heal()
    await members_seen(relays, len(NAMES))
    await eventually(
        lambda: metric(victim.url, "fanout_relay_registry_serving"),
        lambda serving: serving == 1,
        timeout=60,
        what="the victim to serve again",
    )
    assert await metric(victim.url, "fanout_relay_registry_lapses_total") == 1
    newcomer = MovingFollower(mine[0])
    await newcomer.attach(survivors[1].url)  # back in the map, responsible for its parts again
    assert newcomer.relay == victim.url
    target = logged(deployment.log, followers[0]) + 3
    await asyncio.gather(*(f.reached(target) for f in [*followers, newcomer]))
    for follower in [*followers, newcomer]:
        await follower.detach()
    audit_followers(followers, deployment.log, at_least=6)
    # From the relays' own records: the victim stopped serving before any other relay read a
    # map without it, and served again only after every other relay had read it back.
    (lapsed, _), *_ = records(log, "registry: lease lapsed")
    (back, said), *_ = records(log, "registry: back in the map")
    assert isolated < lapsed < isolated + LEASE + 1 and back > healed, (isolated, lapsed, back)
    serving_again = back + float(said.rsplit(" in ", 1)[1].split()[0])
    for other in (path for path in cluster.logs if path != log):
        maps = [(t, text) for t, text in records(other, "registry: members now") if t > isolated]
        dropped = next(t for t, text in maps if name not in text)
        readded = next(t for t, text in maps if t > dropped and name in text)
        # Log times are to the millisecond: the same one says nothing of the order within it.
        assert lapsed <= dropped, f"{other.name} took the victim's parts before it stopped serving"
        assert readded < serving_again, f"{other.name} read the victim back after it served again"
