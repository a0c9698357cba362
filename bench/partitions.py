"""Partitions under load (issue 45, item 2): links between live processes cut and healed at
random (seeded) while subscribers are served, then an audit of what every subscriber got.

Run ``.venv/bin/python bench/partitions.py --partitions 200``; it prints the results as one JSON
object, writes ``bench/results/partitions.json`` and prints a one-line summary last. A short run
(``--partitions 20``) takes a few minutes. Processes on this machine
(docs/benchmarks/partitions.md):

* a Spark publisher (the ``agents`` simulation, 10 ticks/s), a relay on it (``flat``) and a tier
  (a mid relay, an ``edge`` below it), the flat relay and the edge dialing through proxies;
* three relays in a map of responsibility (redirect policy, lease ``LEASE``, 3 s) in a Redis Cluster
  whose nodes announce proxies: each relay can lose Redis alone (``Proxy.isolate``); three more
  in a map of their own with the forward policy (``f0``-``f2``, ``every`` followers at each);
* three relays as one MQTT broker, the peer links to ``b`` and ``c`` through proxies.

Each partition picks a link no partition holds (``flat``, ``tier``, ``redis:mN``, ``redis:fN``,
``mqtt:b``, ``mqtt:c``, ``redis:mqtt-b``, ``redis:mqtt-c``: an MQTT relay alone loses Redis), a
way (both, up, down; a tenth are cuts) and a length (0.5 to ``--longest`` s), heals it, and
measures the recovery: until the link's subscribers are past what the publisher had logged (or
published) at the heal, and a relay of the map serves again. Beside the flat relay's and the
edge's ``every`` followers, ``latest`` views of the same boxes: once healed, each must hold what its
box held by the log at its seq (``latest_differing``). Besides the links, the persistent QoS 2
subscribers at b and c go away (DISCONNECT) and come back to their sessions at random (``AWAY``;
``clients_away``), audited as the others.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from fanout.client import LiveView, SubscriptionError, connect
from fanout.launch import Child, Children
from fanout.publisher.log import SqliteLog
from fanout.testing import followers as flat_followers
from fanout.testing.audit import Rows
from fanout.testing.calibration import calibrate
from fanout.testing.clusterview import Follower as MapFollower
from fanout.testing.clusterview import metric
from fanout.testing.machine import describe, write_results
from fanout.testing.ports import LOOPBACK, free_port
from fanout.testing.proxy import Proxy, Way, proxy
from fanout.testing.redis import cluster_ports, throwaway_redis_cluster
from fanout.testing.wait import NotYet, eventually
from fanout.views import Box
from partitionaudit import audits
from partitionmqtt import MqttClient
from partitionrecords import LEASE, double_served, records

RESULTS = Path(__file__).parent / "results" / "partitions.json"
KEEPALIVE = 2.0  # the flat relay's and the edge's --upstream-keepalive
MAP = ("m0", "m1", "m2")
FORWARD = ("f0", "f1", "f2")  # the forward policy's map
MQTT = ("a", "b", "c")
#: The persistent QoS 2 subscribers at b and c going away and coming back (not a link).
AWAY = ("away:b", "away:c")
BOXES = [Box((x + 40, y + 40), (x + 200, y + 200)) for x in (0, 256, 512, 768) for y in (0, 512)]


class Deployment:
    """Every process and proxy of the run, and the subscribers."""

    def __init__(self, children: Children, stack: contextlib.AsyncExitStack, root: Path) -> None:
        self.children, self.stack, self.root = children, stack, root
        self.links: dict[str, list[Proxy]] = {}
        self.pids: dict[str, int] = {}  # a link isolating one process: its pid
        self.map_logs: dict[str, Path] = {}
        self.map: list[Child] = []
        self.forward_logs: dict[str, Path] = {}
        self.forward: list[Child] = []
        self.named: dict[str, Child] = {}  # the relays of both maps by name
        self.mqtt_ports: dict[str, int] = {}
        self.log = root / "publisher" / "log.db"

    async def start(self, agents: int) -> None:
        config = self.root / "fanout.toml"
        config.write_text(
            "[publisher]\nretention_seconds = 10800\n\n[datasets.agents]\n"
            f'source = {{ kind = "simulation", agents = {agents}, dims = 2 }}\n'
        )
        args = ["--config", str(config), "--port", "0", "--state-dir", str(self.root / "publisher")]
        self.publisher = await self.children.start("publisher", args, self.root / "publisher.log")
        port = int(self.publisher.url.rsplit(":", 1)[1])
        flat = await self._proxy("flat", port)
        keep = ["--upstream-keepalive", str(KEEPALIVE)]
        self.flat = await self._relay("flat", "--publisher", f"ws://{flat.address}", *keep)
        self.mid = await self._relay("mid", "--publisher", self.publisher.url, "--serve-relays")
        tier = await self._proxy("tier", int(self.mid.url.rsplit(":", 1)[1]))
        self.edge = await self._relay("edge", "--upstream", f"ws://{tier.address}", *keep)
        await self._map()
        await self._forward()
        await self._mqtt()

    async def _proxy(self, name: str, port: int) -> Proxy:
        link = await self.stack.enter_async_context(proxy((LOOPBACK, port)))
        self.links.setdefault(name, []).append(link)
        return link

    async def _relay(self, name: str, *args: str) -> Child:
        every = [*args, "--port", "0", "--name", name, "--log-level", "info", "--workers", "1"]
        return await self.children.start("relay", every, self.root / f"{name}.log")

    async def _map(self) -> None:
        ports = cluster_ports(3)
        nodes = [await self._proxy("redis", port) for port in ports]
        announced = throwaway_redis_cluster(ports=ports, announce=[n.port for n in nodes])
        await asyncio.to_thread(self.stack.enter_context, announced)
        for name in MAP:
            self.map_logs[name] = self.root / f"{name}.log"
            child = await self._relay(
                name,
                *("--publisher", self.publisher.url, "--grace", "1"),
                *("--registry", f"redis://{nodes[0].address}", "--registry-lease", str(LEASE)),
                "--log-format",
                "json",
            )
            self.map.append(child)
            self.named[name] = child
            self.links[f"redis:{name}"] = self.links["redis"]
            self.pids[f"redis:{name}"] = child.process.pid
        self.redis = nodes[0].address  # the MQTT relays dial Redis through the proxies too

    async def _forward(self) -> None:
        """The forward policy's map, in a Redis Cluster of its own (the registry's keys hold
        one map), each relay able to lose it alone (``redis:fN``)."""
        ports = cluster_ports(3)
        nodes = [await self.stack.enter_async_context(proxy((LOOPBACK, p))) for p in ports]
        announced = throwaway_redis_cluster(ports=ports, announce=[n.port for n in nodes])
        await asyncio.to_thread(self.stack.enter_context, announced)
        for name in FORWARD:
            self.forward_logs[name] = self.root / f"{name}.log"
            child = await self._relay(
                name,
                *("--publisher", self.publisher.url, "--registry-policy", "forward"),
                *("--registry", f"redis://{nodes[0].address}", "--registry-lease", str(LEASE)),
                "--log-format",
                "json",
            )
            self.forward.append(child)
            self.named[name] = child
            self.links[f"redis:{name}"] = nodes
            self.pids[f"redis:{name}"] = child.process.pid

    async def _mqtt(self) -> None:
        for name in MQTT:
            peer, self.mqtt_ports[name] = free_port(), free_port()
            link = await self._proxy(f"mqtt:{name}", peer)
            child = await self._relay(
                f"mqtt-{name}",
                *("--publisher", self.publisher.url, "--mqtt-port", str(self.mqtt_ports[name])),
                *("--mqtt-redis", self.redis, "--mqtt-lease", "1.5"),
                *("--mqtt-peer-port", str(peer), "--mqtt-peer-advertise", link.address),
            )
            if name != "a":  # b or c alone loses Redis, its peer links up (issue 45)
                self.links[f"redis:mqtt-{name}"] = self.links["redis"]
                self.pids[f"redis:mqtt-{name}"] = child.process.pid
        del self.links["mqtt:a"]  # a's subscribers are none: its links carry nothing audited


class Run:
    """The load, the partitions, and what they cost."""

    def __init__(self, deployment: Deployment, rng: random.Random, args: argparse.Namespace):
        self.d, self.rng, self.args = deployment, rng, args
        self.held: set[str] = set()
        self.log: list[dict[str, Any]] = []
        self.sent = {"q1/a": 0, "q2/a": 0}
        self.loads: list[float] = []
        self.reentered = 0  # map followers that entered again after their view ended
        self.refusals: Counter[str] = Counter()  # failed attempts to enter again, by error
        #: ``latest`` views beside the flat relay's and the edge's ``every`` followers, on
        #: connections of their own: (every follower of the same box, the view).
        self.latest: list[tuple[flat_followers.Follower, LiveView]] = []
        #: What each ``latest`` view held once healed: (its every follower, seq, rows or None
        #: if the view had ended).
        self.latest_at: list[tuple[flat_followers.Follower, int, Rows | None]] = []

    async def subscribe(self) -> None:
        d = self.d
        self.flat = [flat_followers.Follower(box) for box in BOXES[:3]]
        self.edge = [flat_followers.Follower(box) for box in BOXES[3:6]]
        for follower in self.flat:
            await follower.attach(d.flat.url)
        for follower in self.edge:
            await follower.attach(d.edge.url)
        self.mapped = [MapFollower(box) for box in BOXES]
        for n, mapped in enumerate(self.mapped):
            await mapped.attach(d.map[n % len(d.map)].url)
        self.forwarded = [flat_followers.Follower(box) for box in BOXES]  # never redirected
        for n, follower in enumerate(self.forwarded):
            await follower.attach(d.forward[n % len(d.forward)].url)
        ports = d.mqtt_ports
        self.q1 = [MqttClient(ports[n], f"q1-{n}") for n in ("b", "c")]
        self.q2 = [MqttClient(ports[n], f"q2-{n}", persistent=True) for n in ("b", "c")]
        self.shared = [MqttClient(ports[n], f"share-{n}") for n in ("b", "c")]
        for client in self.q1:
            client.client.subscribe("q1/#", qos=1)
        for client in self.q2:
            client.client.subscribe("q2/#", qos=2)
        for client in self.shared:
            client.client.subscribe("$share/pool/q1/#", qos=1)
        self.producer = MqttClient(ports["a"], "producer")
        for url, followers in ((d.flat.url, self.flat), (d.edge.url, self.edge)):
            subscriber = await d.stack.enter_async_context(connect(url))
            for follower in followers:
                self.latest.append((follower, await subscriber.subscribe(follower.box)))
        await asyncio.sleep(3.0)  # the subscriptions reach the shared table

    async def publish(self) -> None:
        """QoS 1 and 2 messages from relay a, 20 a second each, numbered per topic."""
        while True:
            for topic, qos in (("q1/a", 1), ("q2/a", 2)):
                self.sent[topic] += 1
                self.producer.client.publish(topic, str(self.sent[topic]), qos=qos)
            self.loads.append(os.getloadavg()[0])
            await asyncio.sleep(0.05)

    async def repair(self) -> None:
        """A map follower whose view ended (every relay it was sent to had lapsed, or was
        waiting after coming back) enters again at a relay drawn at random, until it is in, as
        a subscriber retrying with a pause would."""
        broken: set[int] = set()
        while True:
            for n, follower in enumerate(self.mapped):
                if n in broken or follower.ended():
                    try:
                        async with asyncio.timeout(30):
                            await follower.attach(self.rng.choice(self.d.map).url)
                        broken.discard(n)
                        self.reentered += 1
                    except (OSError, SubscriptionError, TimeoutError) as error:
                        broken.add(n)
                        self.refusals[type(error).__name__] += 1
            await asyncio.sleep(0.5)

    def logged(self) -> int:
        with SqliteLog(self.d.log) as stored:
            bounds = stored.bounds("agents", self.flat[0].updates[0].epoch)
        return -1 if bounds is None else bounds[1]

    async def partition(self, name: str) -> None:
        if name in AWAY:
            await self.go_away(name)
            return
        links, pid = self.d.links[name], self.d.pids.get(name)
        way: Way = self.rng.choice(["both", "both", "up", "down"])
        cut = self.rng.random() < 0.1 and pid is None
        length = self.rng.uniform(0.5, self.args.longest)
        began = time.monotonic()
        for link in links:
            if pid is not None:
                link.isolate(pid, way)
            elif cut:
                link.cut()
            else:
                link.partition(way)
        await asyncio.sleep(length)
        for link in links:
            link.heal()
        await self._recover(name, "cut" if cut else way, length, began)

    async def go_away(self, name: str) -> None:
        """A persistent session's client goes away for a while and comes back."""
        client = self.q2[MQTT.index(name[-1]) - 1]
        length = self.rng.uniform(0.5, self.args.longest)
        began = time.monotonic()
        await asyncio.to_thread(client.away)
        await asyncio.sleep(length)
        await asyncio.to_thread(client.back)
        await self._recover(name, "away", length, began)

    async def _recover(self, name: str, way: str, length: float, began: float) -> None:
        healed, target = time.monotonic(), self._targets(name)  # what was there at the heal
        waiting: list[str] = []
        try:
            await eventually(
                lambda: self._recovered(name, target, waiting),
                lambda done: done,
                timeout=self.args.recover,
                every=0.1,
            )
            recovery: float | None = time.monotonic() - healed
        except NotYet:
            recovery = None
        self.log.append(
            {"link": name, "way": way, "length_s": round(length, 2)}
            | {"recovery_s": None if recovery is None else round(recovery, 2)}
            | {"at_s": round(began - self.began, 1)}
            | ({"waiting_for": waiting} if recovery is None else {})
        )
        self.held.discard(name)

    def _targets(self, name: str) -> Any:
        if name.startswith(("mqtt:", "away:", "redis:mqtt-")):
            return dict(self.sent)
        return self.logged()

    async def _recovered(self, name: str, target: Any, waiting: list[str]) -> bool:
        """Whether the link's subscribers are past ``target``; ``waiting`` says on what not."""
        waiting.clear()
        if name.startswith(("mqtt:", "away:", "redis:mqtt-")):
            at = MQTT.index(name[-1]) - 1
            audited = (
                [(self.q2, "q2/a")] if name in AWAY else [(self.q1, "q1/a"), (self.q2, "q2/a")]
            )
            for clients, topic in audited:
                numbers = [int(p) for t, p in clients[at].received() if t == topic]
                if not numbers or max(numbers) < target[topic]:
                    waiting.append(f"{topic} at {name}")
            return not waiting
        relay = name.split(":")[1] if name.startswith("redis:") else ""
        followers = {"flat": self.flat, "tier": self.edge}.get(
            name, self.forwarded if relay in FORWARD else self.mapped
        )
        serving = "fanout_relay_registry_serving"
        if relay and await metric(self.d.named[relay].url, serving) != 1:
            waiting.append(f"{name} serving")
        waiting += [str(f.box) for f in followers if not f.updates or f.updates[-1].seq < target]
        return not waiting

    async def snapshot_latest(self) -> None:
        """What each ``latest`` view holds now, once every follower of its box has passed
        its seq (so the audit replays the follower to exactly there)."""
        for follower, view in self.latest:
            held = None if view.state.ended else {k: dict(r) for k, r in view.rows.items()}
            seq = view.state.seq
            self.latest_at.append((follower, seq, held))
            with contextlib.suppress(TimeoutError):
                await follower.reached(seq, timeout=60)

    async def partitions(self) -> None:
        self.began = time.monotonic()
        running: set[asyncio.Task[None]] = set()
        started = 0
        while started < self.args.partitions:
            # One relay at a time loses Redis: a heal heals every connection of a proxy.
            redis = {n for n in self.d.links if n.startswith("redis")}
            taken = self.held | (redis if redis & self.held else {"redis"})
            free = sorted((set(self.d.links) | set(AWAY)) - taken)
            if free:
                name = self.rng.choice(free)
                self.held.add(name)
                running.add(asyncio.create_task(self.partition(name)))
                started += name not in AWAY  # a client away is not a partition of a link
                if started % 10 == 0 and name not in AWAY:
                    print(json.dumps({"progress": started}), file=sys.stderr, flush=True)
            await asyncio.sleep(self.rng.uniform(0.2, self.args.interval))
            running = {task for task in running if not task.done()}
        if running:
            await asyncio.gather(*running)


async def settle(run: Run, timeout: float) -> int:
    """Wait until every subscriber is past what was logged and published after the last heal;
    how many ``every`` views were not by ``timeout`` seconds."""
    target, sent = run.logged() + 3, dict(run.sent)
    every: list[flat_followers.Follower | MapFollower] = [*run.flat, *run.edge]
    every += [*run.mapped, *run.forwarded]
    with contextlib.suppress(NotYet):
        await eventually(
            lambda: (
                all(f.updates and f.updates[-1].seq >= target for f in every)
                and all(
                    max((int(p) for t, p in c.received() if t == topic), default=0) >= sent[topic]
                    for c, topic in [*((c, "q1/a") for c in run.q1), *((c, "q2/a") for c in run.q2)]
                )
            ),
            lambda done: done,
            timeout=timeout,
            every=0.5,
        )
    return sum(not f.updates or f.updates[-1].seq < target for f in every)


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="fanout-partitions-"))
    async with Children() as children, contextlib.AsyncExitStack() as stack:
        deployment = Deployment(children, stack, root)
        await deployment.start(args.agents)
        run = Run(deployment, rng, args)
        await run.subscribe()
        await asyncio.gather(*(f.received(2, timeout=600) for f in [*run.flat, *run.edge]))
        began = time.time()
        loops = [asyncio.create_task(run.publish()), asyncio.create_task(run.repair())]
        try:
            await run.partitions()
            await asyncio.sleep(2.0)
            for task in loops:
                task.cancel()
            behind = await settle(run, args.settle)
            await run.snapshot_latest()
        finally:
            for task in loops:
                task.cancel()
            for follower in [*run.flat, *run.edge, *run.forwarded]:
                await follower.detach()
            for mapped in run.mapped:
                await mapped.detach()
            for client in [*run.q1, *run.q2, *run.shared, run.producer]:
                client.close()
        ended = time.time()
        found = audits(
            deployment.log,
            [*run.flat, *run.edge, *run.mapped, *run.forwarded],
            run.latest_at,
            {"q1": run.q1, "q2": run.q2, "shared": run.shared},
            run.sent,
        )
    recoveries = sorted(p["recovery_s"] for p in run.log if p["recovery_s"] is not None)
    p99 = recoveries[min(len(recoveries) - 1, int(0.99 * len(recoveries)))] if recoveries else None
    every, mqtt_found = found["every"], found["mqtt"]
    links = sorted((set(deployment.links) | set(AWAY)) - {"redis"})
    doubly = {  # seconds two relays of a map served the same part, from their own records
        "redirect": double_served(deployment.map_logs, began, ended),
        "forward": double_served(deployment.forward_logs, began, ended),
    }
    return {
        "benchmark": "partitions",
        "partitions": sum(p["link"] not in AWAY for p in run.log),
        "clients_away": sum(p["link"] in AWAY for p in run.log),
        "lost": every["lost"] + mqtt_found["lost"],
        "duplicated": every["duplicated"],
        "reordered": every["reordered"] + mqtt_found["reordered"],
        "qos2_duplicates": found["qos2_duplicates"],
        # Views that differ, ended, or could not be checked (no update of their seq): none passes.
        "latest_differing": sum(
            found["latest_views"][k] for k in ("differing", "ended", "unchecked")
        ),
        "double_served_s": round(sum(doubly.values()), 3),
        "double_served_by_map_s": {name: round(s, 3) for name, s in doubly.items()},
        "recovery_p50_s": recoveries[len(recoveries) // 2] if recoveries else None,
        "recovery_p99_s": p99,
        "not_recovered": sum(p["recovery_s"] is None for p in run.log),
        "behind_at_end": behind,
        "map_views_entered_again": run.reentered,
        "map_entries_refused": dict(run.refusals),
        **found,
        "by_link": {n: sum(p["link"] == n for p in run.log) for n in links},
        "lapses": {
            name: len(records(log, "registry: lease lapsed"))
            for name, log in (deployment.map_logs | deployment.forward_logs).items()
        },
        "load_average_during": {
            "mean": round(sum(run.loads) / max(1, len(run.loads)), 2),
            "max": round(max(run.loads, default=0.0), 2),
        },
        "duration_s": round(ended - began, 1),
        "seed": args.seed,
        "partition_log": run.log,
        "machine": describe(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=20, help="partitions (default: 20)")
    parser.add_argument("--interval", type=float, default=2.0, help="most seconds between starts")
    parser.add_argument("--longest", type=float, default=6.0, help="longest partition, seconds")
    parser.add_argument("--recover", type=float, default=60.0, help="seconds a heal may take")
    parser.add_argument("--settle", type=float, default=120.0, help="seconds to catch up at end")
    parser.add_argument("--agents", type=int, default=2000, help="simulated agents")
    parser.add_argument("--seed", type=int, default=45, help="random seed of the plan")
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    args = parser.parse_args()
    calibration = calibrate()
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    result = asyncio.run(bench(args)) | {"calibration": calibration}
    write_results(result, None if args.no_save else RESULTS)
    keys: tuple[str, ...] = ("partitions", "lost", "duplicated", "reordered", "qos2_duplicates")
    keys += ("double_served_s", "latest_differing", "recovery_p99_s", "not_recovered")
    keys += ("behind_at_end",)
    keys += ("load_average_during",)
    print(json.dumps({key: result[key] for key in keys}))
    clean = not any(result[k] for k in keys[1:7]) and not result["not_recovered"]
    clean = clean and not result["behind_at_end"]
    return 0 if clean else 1


if __name__ == "__main__":
    raise SystemExit(main())
