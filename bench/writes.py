"""Writes at the speed of the wire (issue 40): the time from a write, made through each entry
point, to the watchers on the relay it entered at and on another relay, next to a ``confirmed``
watcher of the same view (the publisher's micro-batch path), in one run.

One real deployment on loopback: ``fanout publisher`` with a ``topic`` dataset fed by producers
(Spark ``local[*]``), two ``fanout relay``s A and B on it, each with an MQTT port routed to the
dataset, in one MQTT cluster (a throwaway Redis Cluster; ``--no-cluster``: none). Entry points
(``--entries``, taken in turn, one write at a time, each a topic of its own): ``ws``
(``Subscriber.publish`` on A), ``http`` (``POST /v1/publish`` on A), ``mqtt`` (a retained QoS 1
PUBLISH on A's MQTT port) and ``producer`` (``fanout.client`` producer at the publisher: every
relay is another relay to it). Watchers of ``live/#``: ``latest`` WebSocket views on A and B, an
MQTT subscriber on A and on B, and a ``confirmed`` view on A. Per write and watcher, the time
from the call to the watcher holding it; each watcher's path is ``live`` when its median is
below half the confirmed one's (``paths``), else ``batch``. ``same_relay`` is A's ``latest``
view for writes entering at A; ``other_relay`` is B's for them and both for the producer's;
``lost`` (writes the confirmed view never held), ``duplicated`` (a value any watcher got again)
and ``corrected`` (relays' ``/metrics``) are over all entry points; ``durable`` is the time
to the call's return (the publisher's answer; not MQTT's, whose call does not wait). Prints
one JSON object last (median of ``--runs`` runs, spread, per-entry breakdown, CPU seconds of
each relay, of the publisher with its JVM and of this client process, paho's threads too).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from fanout.client import LiveView, connect
from fanout.client.publisher import open_producer
from fanout.client.subscriber import Update
from fanout.launch import Child, Children
from fanout.metrics import scrape
from fanout.testing.calibration import calibrate
from fanout.testing.machine import cpu_seconds, describe, tree, write_results
from fanout.testing.ports import LOOPBACK, free_port
from fanout.testing.redis import throwaway_redis_cluster
from fanout.views.topic import parse as topic

RESULTS = Path(__file__).parent / "results" / "writes.json"
ENTRIES = ("ws", "http", "mqtt", "producer")
WATCHERS = ("latest_a", "latest_b", "mqtt_a", "mqtt_b", "confirmed")
CONFIG = """
[datasets.sensors]
key = "topic"
schema = { topic = "string", payload = "string" }
index = "topic"
source = "ingest"
"""


class Arrivals:
    """When each (topic, payload) first reached a watcher (noted by whichever thread got it),
    and values sent to it again; ``at`` waits on the event loop."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], float] = {}
        self.again: list[str] = []  # the topics sent again
        self._lock = threading.Lock()
        self._loop = asyncio.get_running_loop()
        self._waiting: dict[tuple[str, str], asyncio.Future[float]] = {}

    def arrived(self, topic_name: str, payload: str) -> None:
        """Each topic is written once: a second arrival is a duplicate."""
        now, key = time.perf_counter(), (topic_name, payload)
        with self._lock:
            if key in self.seen:
                self.again.append(topic_name)
                return
            self.seen[key] = now
            waiter = self._waiting.pop(key, None)
        if waiter is not None:

            def settle() -> None:  # the wait may have timed out meanwhile
                if not waiter.done():
                    waiter.set_result(now)

            self._loop.call_soon_threadsafe(settle)

    async def at(self, topic_name: str, payload: str, timeout: float) -> float | None:
        """When it arrived, waiting up to ``timeout`` seconds (None: it did not)."""
        key = (topic_name, payload)
        with self._lock:
            if key in self.seen:
                return self.seen[key]
            waiter = self._waiting[key] = self._loop.create_future()
        try:
            return await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            return None


async def follow(view: LiveView, arrivals: Arrivals) -> None:
    async for update in view:
        for topic_name, payload in sent(update):
            arrivals.arrived(topic_name, payload)


def sent(update: Update) -> list[tuple[str, str]]:
    """The (topic, payload) rows an update entered or updated (none of a full push)."""
    out: list[tuple[str, str]] = []
    for rows in () if update.full else (update.entered, update.updated):
        if rows:
            out += zip(rows["topic"].tolist(), rows["payload"].tolist(), strict=True)
    return out


@contextlib.contextmanager
def mqtt_client(port: int, name: str, arrivals: Arrivals | None = None) -> Iterator[mqtt.Client]:
    """A paho 5.0 client on ``port``; with ``arrivals``, subscribed to ``live/#``."""
    client_id = f"{name}-{time.time_ns()}"
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id, protocol=mqtt.MQTTv5)
    subscribed = threading.Event()
    if arrivals is not None:
        client.on_message = lambda _c, _u, m: arrivals.arrived(m.topic, m.payload.decode())
        client.on_subscribe = lambda *_: subscribed.set()
    client.connect(LOOPBACK, port)
    client.loop_start()
    try:
        if arrivals is not None:
            client.subscribe("live/#", qos=1)
            if not subscribed.wait(10):
                raise RuntimeError(f"MQTT subscription on {port} not acknowledged")
        yield client
    finally:
        client.disconnect()
        client.loop_stop()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def figures(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50_ms": None, "p99_ms": None}
    return {
        "p50_ms": round(statistics.median(values), 2),
        "p99_ms": round(percentile(values, 0.99), 2),
    }


@contextlib.asynccontextmanager
async def writers(relay: Child, publisher: Child, mqtt_port: int) -> AsyncIterator[Any]:
    """A write function per entry point: ``write(entry, topic, payload)``."""
    base = relay.url.replace("ws://", "http://")
    async with (
        connect(relay.url) as subscriber,
        httpx.AsyncClient(base_url=base, timeout=30) as web,
        open_producer(publisher.url) as producer,
    ):
        with mqtt_client(mqtt_port, "writer") as client:

            async def write(entry: str, name: str, payload: str) -> None:
                row = {"topic": name, "payload": payload}
                if entry == "ws":
                    await subscriber.publish("sensors", [row])
                elif entry == "http":
                    answer = await web.post("/v1/publish/sensors", json={"upserts": [row]})
                    answer.raise_for_status()
                elif entry == "mqtt":
                    client.publish(name, payload.encode(), qos=1, retain=True)
                else:
                    await producer.publish("sensors", [row])

            yield write


async def one_run(
    deployment: dict[str, Any], args: argparse.Namespace, numbers: Iterator[int]
) -> dict[str, Any]:
    relay_a, relay_b, publisher = deployment["a"], deployment["b"], deployment["publisher"]
    watchers = {name: Arrivals() for name in WATCHERS}
    started: dict[str, tuple[str, str, float]] = {}  # topic -> entry, payload, when written
    returned: dict[str, float] = {}  # topic -> when its call returned (once durable, but MQTT's)
    urls = [relay_a.url, relay_b.url]
    async with connect(relay_a.url) as here, connect(relay_b.url) as there:
        views = {
            "latest_a": await here.subscribe(topic("live/#"), dataset="sensors", rate=1000.0),
            "latest_b": await there.subscribe(topic("live/#"), dataset="sensors", rate=1000.0),
            "confirmed": await here.subscribe(
                topic("live/#"), dataset="sensors", rate=1000.0, confirmed=True
            ),
        }
        for view in views.values():  # their first pushes
            while not view.updates:
                await view.wait_updates()
        tasks = [asyncio.create_task(follow(v, watchers[n])) for n, v in views.items()]
        with (
            mqtt_client(deployment["mqtt_a"], "watch-a", watchers["mqtt_a"]),
            mqtt_client(deployment["mqtt_b"], "watch-b", watchers["mqtt_b"]),
        ):
            await asyncio.sleep(1.0)  # the cluster's match table settles
            before = [await asyncio.to_thread(scrape, url) for url in urls]
            cpu_before = cpu(deployment)
            async with writers(relay_a, publisher, deployment["mqtt_a"]) as write:
                for _ in range(args.writes):
                    for entry in args.entries:
                        number = next(numbers)
                        name, payload = f"live/{entry}/{number}", str(number)
                        started[name] = (entry, payload, time.perf_counter())
                        await write(entry, name, payload)
                        returned[name] = time.perf_counter()
                        for watcher in ("latest_a", "latest_b"):  # one write at a time
                            await watchers[watcher].at(name, payload, args.timeout)
            for name, (_, payload, _) in started.items():  # the slower paths, afterwards
                for watcher in ("mqtt_a", "mqtt_b", "confirmed"):
                    await watchers[watcher].at(name, payload, args.timeout)
            await asyncio.sleep(args.settle)  # anything sent again
            cpu_after = cpu(deployment)
            after = [await asyncio.to_thread(scrape, url) for url in urls]
        for task in tasks:
            task.cancel()
    counted = {
        name: sum(a.get(name, 0.0) - b.get(name, 0.0) for a, b in zip(after, before, strict=True))
        for name in after[0]
    }
    used = {name: round(cpu_after[name] - cpu_before[name], 2) for name in cpu_after}
    durable = [
        (returned[name] - at) * 1000
        for name, (entry, _, at) in started.items()
        if entry != "mqtt"  # paho's publish returns before its PUBACK
    ]
    return {
        **summarise(watchers, started, args, counted),
        "durable_p50_ms": figures(durable)["p50_ms"],
        "cpu_s": used,
    }


def summarise(
    watchers: dict[str, Arrivals],
    started: dict[str, tuple[str, str, float]],
    args: argparse.Namespace,
    counted: dict[str, float],
) -> dict[str, Any]:
    """The figures of one run: ``counted`` holds the relays' ``/metrics`` counts meanwhile."""
    times: dict[tuple[str, str], list[float]] = {}
    missing: dict[tuple[str, str], int] = {}
    for name, (entry, payload, at) in started.items():
        for watcher, arrivals in watchers.items():
            arrived = arrivals.seen.get((name, payload))
            if arrived is None:
                missing[(entry, watcher)] = missing.get((entry, watcher), 0) + 1
            else:
                times.setdefault((entry, watcher), []).append((arrived - at) * 1000)
    confirmed = [t for (_, w), ts in times.items() if w == "confirmed" for t in ts]
    floor = statistics.median(confirmed) / 2 if confirmed else float("inf")
    per_entry: dict[str, Any] = {}
    for entry in args.entries:
        per_entry[entry] = {}
        for watcher in WATCHERS:
            values = times.get((entry, watcher), [])
            row: dict[str, Any] = {
                **figures(values),
                "missing": missing.get((entry, watcher), 0),
                "duplicated": sum(t.split("/")[1] == entry for t in watchers[watcher].again),
            }
            if watcher != "confirmed":
                median = row["p50_ms"]
                row["path"] = "none" if median is None else "live" if median < floor else "batch"
            per_entry[entry][watcher] = row
    same = [t for e in args.entries if e != "producer" for t in times.get((e, "latest_a"), [])]
    other = [t for e in args.entries if e != "producer" for t in times.get((e, "latest_b"), [])]
    other += times.get(("producer", "latest_a"), []) + times.get(("producer", "latest_b"), [])

    return {
        "same_relay_p50_ms": figures(same)["p50_ms"],
        "same_relay_p99_ms": figures(same)["p99_ms"],
        "other_relay_p50_ms": figures(other)["p50_ms"],
        "other_relay_p99_ms": figures(other)["p99_ms"],
        "confirmed_p50_ms": figures(confirmed)["p50_ms"],
        "confirmed_p99_ms": figures(confirmed)["p99_ms"],
        "corrected": int(counted.get("fanout_relay_live_corrected_total", 0)),
        "deduplicated": int(counted.get("fanout_relay_live_deduplicated_total", 0)),
        "lost": sum(n for (_, w), n in missing.items() if w == "confirmed"),
        "duplicated": sum(len(arrivals.again) for arrivals in watchers.values()),
        "passed": int(counted.get("fanout_relay_live_passed_total", 0)),
        "writes": len(started),
        "entries": per_entry,
        "paths": {f"{e}->{w}": per_entry[e][w]["path"] for e in args.entries for w in WATCHERS[:4]},
    }


def cpu(deployment: dict[str, Any]) -> dict[str, float]:
    """CPU seconds so far: each relay, the publisher with its Spark JVM, this client process."""
    own = os.times()
    return {
        "relay_a": cpu_seconds(deployment["a"].pid),
        "relay_b": cpu_seconds(deployment["b"].pid),
        "publisher_and_jvm": sum(cpu_seconds(p) for p in tree(deployment["publisher"].pid)),
        "clients": own.user + own.system,
    }


async def bench(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        redis = None
        if args.cluster:
            host, port = stack.enter_context(throwaway_redis_cluster())[0]
            redis = f"{host}:{port}"
        async with Children() as children:
            deployment = await deploy(children, root, redis)
            numbers, runs = itertools.count(1), []
            try:
                for _ in range(args.runs):
                    runs.append(await one_run(deployment, args, numbers))
                    print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
            finally:
                for name in ("b", "a", "publisher"):
                    await deployment[name].stop()
    return {**combine(runs), "load_average_1m_end": round(os.getloadavg()[0], 2), "runs": runs}


async def deploy(children: Children, root: Path, redis: str | None) -> dict[str, Any]:
    (root / "fanout.toml").write_text(CONFIG)
    publisher = await children.start(
        "publisher",
        ["--config", str(root / "fanout.toml"), "--port", "0", "--state-dir", str(root / "state")],
        root / "publisher.log",
    )
    deployment: dict[str, Any] = {"publisher": publisher}
    for name in ("a", "b"):
        port = free_port()
        args = ["--publisher", publisher.url, "--port", "0", "--name", name, "--workers", "1"]
        args += ["--mqtt-port", str(port), "--mqtt-dataset", "sensors"]
        args += [] if redis is None else ["--mqtt-redis", redis]
        deployment[name] = await children.start("relay", args, root / f"relay-{name}.log")
        deployment[f"mqtt_{name}"] = port
    return deployment


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each top-level figure over the runs, and its spread."""
    summary: dict[str, Any] = {}
    for key, value in runs[0].items():
        if not isinstance(value, int | float) or key == "writes":
            continue
        values = [run[key] for run in runs if run[key] is not None]
        if values:
            summary[key] = statistics.median(values)
            summary[f"{key}_spread"] = [min(values), max(values)]
    summary["lost"] = sum(run["lost"] for run in runs)
    summary["duplicated"] = sum(run["duplicated"] for run in runs)
    summary["writes"] = sum(run["writes"] for run in runs)
    summary["cpu_s"] = {
        name: statistics.median(run["cpu_s"][name] for run in runs) for name in runs[0]["cpu_s"]
    }
    summary["entries"] = runs[-1]["entries"]  # the last run's breakdown; each run's is in runs
    summary["paths"] = {
        key: sorted({run["paths"][key] for run in runs}) for key in runs[0]["paths"]
    }
    return summary


def entries(text: str) -> list[str]:
    chosen = [name.strip() for name in text.split(",") if name.strip()]
    unknown = set(chosen) - set(ENTRIES)
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"entries are among {','.join(ENTRIES)}: {text!r}")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--writes", type=int, default=50, help="writes per entry point per run")
    parser.add_argument(
        "--entries", type=entries, default=list(ENTRIES), help="ws,http,mqtt,producer"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a watcher may take")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds to wait for repeats")
    parser.add_argument("--no-cluster", dest="cluster", action="store_false")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    args = parser.parse_args()
    calibration = calibrate()
    with tempfile.TemporaryDirectory(prefix="fanout-bench-writes-") as root:
        result = asyncio.run(bench(args, Path(root)))
    write_results(
        {**result, "machine": describe(), "calibration": calibration},
        None if args.no_save else args.output,
    )


if __name__ == "__main__":
    main()
