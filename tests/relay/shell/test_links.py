"""Link-aware delivery over real sockets (relay/core/links.py, relay/shell/server.py's probes):
a real relay on a scripted publisher ticking ten times a second, one subscriber behind a
``testing.proxy`` link slowed to a fraction of what its view asks, and a neighbour of the same
view on the same relay, direct.

While the link is slow, the relay finds it out from its pings, paces the slow one's pushes
and sends its creations and deletions first: the keys it holds are the view's at every push,
its positions may lag. The neighbour gets every tick. Once the link recovers, the slow one's
copy is the view again, exactly, and its link is free at full detail.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import httpx
from tests.relay.shell.deployments import running

from fanout.background import Background
from fanout.client import LiveView, Update, connect
from fanout.relay.config import Limits
from fanout.testing.ports import LOOPBACK
from fanout.testing.proxy import proxy
from fanout.testing.wait import eventually
from fanout.views import Box

VIEW = Box((0, 0), (100, 100))
INSIDE, OUTSIDE = range(1, 101), range(101, 201)
#: Bytes a second the slow link takes: a quarter of what the view asks (a hundred rows moving
#: at every tick, ten ticks a second).
SLOW = 6_000


class World:
    """The scripted publisher's agents: every one inside the view moves a little at each tick,
    one leaves and one comes in. ``at[seq]``: every agent's position after batch ``seq``."""

    def __init__(self) -> None:
        self.where = {k: (float(k % 10 * 10 + 1), float(k // 10 % 10 * 10 + 1)) for k in INSIDE}
        self.where |= {k: (500.0, float(k)) for k in OUTSIDE}
        self.at: dict[int, dict[int, tuple[float, float]]] = {}

    def inside(self, seq: int) -> dict[int, tuple[float, float]]:
        return {k: p for k, p in self.at[seq].items() if p[0] <= 100 and p[1] <= 100}

    def tick(self) -> dict[str, list]:
        inside = sorted(k for k, p in self.where.items() if p[0] <= 100)
        outside = sorted(k for k, p in self.where.items() if p[0] > 100)
        moved = {k: (self.where[k][0] + 0.01, self.where[k][1]) for k in inside[1:]}
        moved[inside[0]] = (500.0, self.where[inside[0]][1])  # leaves
        moved[outside[0]] = (50.5, 50.5)  # comes in
        self.where |= moved
        return columns(moved)


def columns(rows: dict[int, tuple[float, float]]) -> dict[str, list]:
    return {
        "id": list(rows),
        "x": [p[0] for p in rows.values()],
        "y": [p[1] for p in rows.values()],
    }


class Recorder:
    """A ``latest`` view's updates, and the keys and positions it held after each."""

    def __init__(self, view: LiveView) -> None:
        self.view = view
        self.updates: list[Update] = []
        self.held: list[tuple[int, dict[int, tuple[float, float]]]] = []  # (seq, rows)

    async def run(self) -> None:
        async for update in self.view:
            self.updates.append(update)
            rows = {k: (row["x"], row["y"]) for k, row in self.view.rows.items()}
            self.held.append((self.view.seq, rows))  # pushes applied since: rows are at its seq


async def test_a_slow_links_subscriber_gets_creations_first_and_its_neighbour_is_unaffected():
    world = World()
    async with (
        running(limits=Limits()) as (publisher, relay, url),
        proxy((LOOPBACK, int(url.rsplit(":", 1)[1]))) as link,
        connect(f"ws://{link.address}") as far,
        connect(url) as near,
        httpx.AsyncClient(timeout=10) as http,
        Background() as tasks,
    ):
        slow_view = await far.subscribe(VIEW, rate=10.0)
        acquire = await publisher.next_acquire()
        batch = await publisher.send(columns(world.where), snapshots=[acquire.prim])
        world.at[batch.seq] = dict(world.where)
        slow = Recorder(slow_view)
        neighbour = Recorder(await near.subscribe(VIEW, rate=10.0))

        async def ticking() -> None:
            while True:
                await asyncio.sleep(0.1)
                batch = await publisher.send(world.tick())
                world.at[batch.seq] = dict(world.where)

        for task in (slow.run(), neighbour.run(), ticking()):
            tasks.start(task)
        await eventually(lambda: len(slow.updates) >= 5 and len(neighbour.updates) >= 5)
        admin = url.replace("ws://", "http://") + "/v1/admin/subscribers?top=10"

        async def links() -> list[dict]:
            return [s["link"] for s in (await http.get(admin)).json()["top"]]

        link.slow(rate=SLOW, way="down")
        slowed, before, since = time.monotonic(), len(neighbour.updates), len(slow.held)
        reports = []  # the fitted link's, every quarter of a second while the link is slow
        while time.monotonic() < slowed + 5.0:
            reports += [x for x in await links() if x.get("fitted")]
            await asyncio.sleep(0.25)
        link.heal()
        during, held = neighbour.updates[before:], slow.held[since:]

        # The neighbour got (nearly) every tick, none long after it came.
        assert len(during) >= 0.8 * (during[-1].seq - during[0].seq), "the neighbour lost ticks"
        gaps = [b.received_at - a.received_at for a, b in itertools.pairwise(during)]
        assert max(gaps) < 1.0, f"the neighbour waited {max(gaps):.2f} s for a push"
        # The slow one: its link was found out, fewer pushes went to it...
        assert reports, "the slow link was never fitted"
        assert reports[-1]["drain_bytes_per_second"] < 3 * SLOW, reports[-1]
        assert len(held) < len(during) / 2
        # ... and at every push it held the view's keys (creations and deletions first), while
        # some of its positions waited.
        assert all(set(rows) == set(world.inside(seq)) for seq, rows in held)
        assert any(rows != world.inside(seq) for seq, rows in held), "no move ever waited"
        assert relay.core.serving.links.fitted_pushes > 0

        # The link recovers: its copy is the view, exactly, and its link free at full detail.
        await eventually(
            lambda: slow.held[-1][1] == world.inside(slow.held[-1][0]),
            timeout=10,
            what="the slow subscriber's copy to be the view",
        )
        await eventually(
            links,
            lambda found: all(not x["fitted"] and x["detail"] == "full" for x in found),
            timeout=10,
            what="the link to be free at full detail",
        )
        tasks.cancel()
