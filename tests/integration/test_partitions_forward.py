"""A forwarding relay that loses Redis while it still reaches the rest (issue 45): three relays
of a map with the forward policy (``--registry-policy forward``), a Spark publisher, and a Redis
Cluster whose nodes announce proxies, so that one relay alone can be cut from it
(``Proxy.isolate``).

Cut past its lease, the relay keeps its ``every`` subscribers (no redirect, no drop, nothing
lost, duplicated or reordered: ``testing.audit`` against the publisher's log) but owns no part
(``cluster.upstreams`` rule 4): what it held of its own parts at the publisher is released there
and taken from their new owners over peer links. Healed, it is back in the map and, a lease
later, takes its own parts from the publisher again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from fanout.cluster.responsibility import ResponsibilityMap
from fanout.launch import Child, Children
from fanout.testing.clusterview import members_seen, metric, primitives_by_relay, started_together
from fanout.testing.followers import Follower, check, logged
from fanout.testing.ports import LOOPBACK
from fanout.testing.proxy import Proxy, proxy
from fanout.testing.redis import cluster_ports, throwaway_redis_cluster
from fanout.testing.wait import eventually
from fanout.views import Box

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

NAMES = ("f0", "f1", "f2")
LEASE = 2.0
#: One box in each of sixteen cells of the map's 256-unit grid.
CELLS = [Box((x + 60, y + 60), (x + 190, y + 190)) for x in range(0, 1024, 256) for y in (0, 256)]
CELLS += [
    Box((x + 60, y + 60), (x + 190, y + 190)) for x in range(0, 1024, 256) for y in (512, 768)
]


@dataclass
class ForwardMap:
    publisher: Child
    log: Path  # the publisher's
    relays: list[Child]
    links: list[Proxy]  # one in front of each Redis node: every relay dials the nodes there


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(children: Children, tmp_path: Path) -> AsyncIterator[ForwardMap]:
    args = ["--port", "0", "--state-dir", str(tmp_path / "publisher"), "--agents", "2000"]
    publisher = await children.start(
        "publisher", [*args, "--log-level", "info"], tmp_path / "publisher.log"
    )
    ports = cluster_ports(3)
    async with contextlib.AsyncExitStack() as stack:
        links = [await stack.enter_async_context(proxy((LOOPBACK, port))) for port in ports]
        announced = throwaway_redis_cluster(ports=ports, announce=[link.port for link in links])
        await asyncio.to_thread(stack.enter_context, announced)  # its checks dial the proxies
        starting = []
        for name in NAMES:
            args = ["--publisher", publisher.url, "--port", "0", "--name", name, "--grace", "1"]
            args += ["--registry", f"redis://{links[0].address}", "--registry-policy", "forward"]
            args += ["--registry-lease", str(LEASE), "--log-level", "info"]
            starting.append(children.start("relay", args, tmp_path / f"relay-{name}.log"))
        relays = await stack.enter_async_context(started_together(*starting))
        yield ForwardMap(publisher, tmp_path / "publisher" / "log.db", relays, links)


async def held_here(cluster: ForwardMap, relay: Child, name: str) -> tuple[float, float, float]:
    """What ``relay`` holds: (primitives the publisher holds for it, its own primitives, those
    it forwards to other relays)."""
    at_publisher = (await primitives_by_relay(cluster.publisher)).get(name, 0.0)
    mine = await metric(relay.url, "fanout_relay_primitives")
    return at_publisher, mine, await metric(relay.url, "fanout_relay_forwarded_primitives")


async def test_a_forwarding_relay_that_loses_redis_keeps_its_subscribers_and_owns_nothing(
    cluster: ForwardMap,
) -> None:
    relays, name = cluster.relays, NAMES[0]  # f0: every other relay's name sorts after it
    victim, survivors = relays[0], relays[1:]
    await members_seen(relays, len(NAMES))
    owners = ResponsibilityMap({n: c.url for n, c in zip(NAMES, relays, strict=True)})
    named = [owners.owner_of("agents", box).name for box in CELLS]
    mine = [box for box, owner in zip(CELLS, named, strict=True) if owner == name][:2]
    theirs = [box for box, owner in zip(CELLS, named, strict=True) if owner != name][:2]
    assert mine and theirs, named
    followers = [Follower(box) for box in [*mine, *theirs]]
    for follower in followers:
        await follower.attach(victim.url)
    await asyncio.gather(*(f.received(3) for f in followers))
    # Serving: its own parts from the publisher, the others' from their owners.
    await eventually(
        lambda: held_here(cluster, victim, name),
        lambda held: held[0] > 0 and held[2] > 0 and held[0] + held[2] == held[1],
        timeout=60,
        what="the victim's own parts at the publisher, the others' forwarded",
    )
    for link in cluster.links:
        link.isolate(victim.process.pid)  # the victim alone loses Redis
    await eventually(
        lambda: metric(victim.url, "fanout_relay_registry_serving"),
        lambda serving: serving == 0,
        timeout=LEASE + 10,
        what="the victim to stop serving",
    )
    # It owns nothing: every part taken from the map without it, none from the publisher.
    await eventually(
        lambda: held_here(cluster, victim, name),
        lambda held: held[0] == 0 and held[1] > 0 and held[2] == held[1],
        timeout=60,
        what="the victim's parts released at the publisher and forwarded",
    )
    await members_seen(survivors, len(NAMES) - 1)  # its lease ran out in Redis too
    lapsed = logged(cluster.log, followers[0]) + 3
    await asyncio.gather(*(f.reached(lapsed) for f in followers))  # served throughout
    assert (await held_here(cluster, victim, name))[0] == 0, "a part from the publisher, lapsed"
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
    await eventually(
        lambda: held_here(cluster, victim, name),
        lambda held: held[0] > 0 and held[0] + held[2] == held[1],
        timeout=60,
        what="the victim's own parts at the publisher again",
    )
    target = logged(cluster.log, followers[0]) + 3
    await asyncio.gather(*(f.reached(target) for f in followers))
    assert [f.failures for f in followers] == [[]] * len(followers), "subscribers were dropped"
    for follower in followers:
        await follower.detach()
        check(follower, cluster.log)
