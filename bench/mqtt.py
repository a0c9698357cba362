"""MQTT side by side: one Mosquitto, one fanout relay, three fanout relays over Redis Cluster.

The same clients (paho-mqtt 2.x, one thread each) in every case: SUBSCRIBERS subscribers to
``bench/+/x``, spread round robin over the brokers, and one publisher on the first broker
sending MESSAGES QoS 0 messages as fast as paho takes them, each carrying the time it was sent
(``time.perf_counter_ns``: one host, one clock). Reported per case: messages delivered per
second (all subscribers together, from the first send to the last receipt) and the p50/p99 of
publish-to-receive latency, the median of RUNS runs and their spread; for the cluster also the
Redis look-ups per message (HGETALL calls on all nodes, from Redis' own counters, divided by the
messages published).

Throughput comes from runs where the publisher sends its messages in one burst; latency from
runs where it sends them at RATE a second (200 by default: SUBSCRIBERS x RATE deliveries a
second, well below every case's throughput), so that it is the brokers' and not a queue's.

Then the spatial part (``bench/mqttspatial.py``): the relay benchmark's moving entities as
per-cell topics on Mosquitto and on the relay's MQTT listener, and as box views on one relay;
the most subscribers each holds at 10 Hz with p99 <= 100 ms, the broker's CPU per useful row
(a row inside the subscriber's box), bytes per useful row, the fraction of delivered rows that
are useful, with compiled clients whose CPU is checked (``mosquitto_*``, ``relay_*``,
``relay_mqtt_*``): medians of RUNS runs and spreads. ``--spatial`` runs only that part and
writes ``bench/results/mqtt_spatial.json`` (``--quick``: one short coarse run, written to
``mqtt_spatial_quick.json``). It needs ``cc`` and libmosquitto's headers (``libmosquitto-dev``).

    .venv/bin/python bench/mqtt.py [--subscribers 20] [--messages 2000] [--runs 3] [--rate 200]
    .venv/bin/python bench/mqtt.py --spatial [--quick] [--entities 20000] [--start 500]
        [--limit 8000] [--processes 2] [--cases mosquitto relay relay_mqtt]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from fanout.launch import Children
from fanout.testing.calibration import calibrate
from fanout.testing.machine import describe, write_results
from fanout.testing.ports import LOOPBACK, free_port
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.redis import throwaway_redis_cluster
from fanout.wire.messages import Catalog
from mqttspatial import CASES, spatial_runs

RESULTS = Path(__file__).parent / "results" / "mqtt.json"
SPATIAL_RESULTS = Path(__file__).parent / "results" / "mqtt_spatial.json"


@contextlib.contextmanager
def mosquitto() -> Iterator[list[int]]:
    """One Mosquitto broker on a free loopback port."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="fanout-mosquitto-") as home:
        config = Path(home) / "mosquitto.conf"
        config.write_text(f"listener {port} {LOOPBACK}\nallow_anonymous true\n")
        process = subprocess.Popen(["mosquitto", "-c", str(config)], stderr=subprocess.DEVNULL)
        try:
            _wait_port(port)
            yield [port]
        finally:
            process.terminate()
            process.wait(10)


@contextlib.asynccontextmanager
async def fanout_relays(count: int, redis: str | None, logs: Path) -> AsyncIterator[list[int]]:
    """``count`` relay processes (in one cluster if ``redis``); their MQTT ports."""
    async with serving(ScriptedPublisher(Catalog([]))) as url, Children() as children:
        ports = []
        for n in range(count):
            port = free_port()
            args = ["--publisher", url, "--port", "0", "--name", f"r{n}", "--workers", "1"]
            args += ["--mqtt-port", str(port), "--read-rate", "0"]
            if redis is not None:
                args += ["--mqtt-redis", redis]
            await children.start("relay", args, logs / f"r{n}.log")
            ports.append(port)
        yield ports


def _wait_port(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


class Subscriber:
    def __init__(self, port: int, name: str) -> None:
        self.latencies: list[float] = []
        self.last = 0.0
        self.lock = threading.Lock()
        self.subscribed = threading.Event()
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, name, protocol=mqtt.MQTTv5)
        self.client.on_message = self._on_message
        self.client.on_subscribe = lambda *_: self.subscribed.set()
        self.client.connect(LOOPBACK, port)
        self.client.loop_start()
        self.client.subscribe("bench/+/x")

    def _on_message(self, client: object, userdata: object, message: mqtt.MQTTMessage) -> None:
        now = time.perf_counter_ns()
        with self.lock:
            self.latencies.append((now - int(message.payload)) / 1e6)
            self.last = now / 1e9

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def _hgetall_calls(nodes: list[tuple[str, int]]) -> int:
    calls = 0
    for host, port in nodes:
        text = subprocess.run(
            ["redis-cli", "-h", host, "-p", str(port), "info", "commandstats"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for line in text.splitlines():
            if line.startswith("cmdstat_hgetall:"):
                calls += int(line.split("calls=")[1].split(",")[0])
    return calls


async def one_run(
    ports: list[int], subscribers: int, messages: int, rate: float | None = None
) -> dict[str, float]:
    """Publish ``messages`` at ``ports[0]`` to ``subscribers`` spread over ``ports``, in one
    burst or ``rate`` a second."""
    subs = [Subscriber(ports[n % len(ports)], f"s{n}-{time.time_ns()}") for n in range(subscribers)]
    publisher = mqtt.Client(
        CallbackAPIVersion.VERSION2, f"p-{time.time_ns()}", protocol=mqtt.MQTTv5
    )
    publisher.max_queued_messages_set(0)
    publisher.connect(LOOPBACK, ports[0])
    publisher.loop_start()
    try:
        for sub in subs:
            await asyncio.to_thread(sub.subscribed.wait, 10)
        await asyncio.sleep(1.0)  # a cluster's table writes settle
        first = time.perf_counter()
        for n in range(messages):
            if rate is not None:
                await asyncio.sleep(max(0.0, first + n / rate - time.perf_counter()))
            publisher.publish(f"bench/{n % 10}/x", str(time.perf_counter_ns()).encode())
        expected = messages * subscribers
        deadline = time.monotonic() + 60
        # Polled: paho's threads count the receipts, nothing in this loop could set an Event.
        while time.monotonic() < deadline and sum(len(s.latencies) for s in subs) < expected:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        latencies = sorted(x for s in subs for x in s.latencies)
        last = max(s.last for s in subs)
        return {
            "delivered": len(latencies),
            "msgs_per_s": len(latencies) / (last - first) if latencies else 0.0,
            "p50_ms": latencies[len(latencies) // 2] if latencies else float("nan"),
            "p99_ms": latencies[int(len(latencies) * 0.99)] if latencies else float("nan"),
        }
    finally:
        publisher.disconnect()
        await asyncio.to_thread(publisher.loop_stop)
        for sub in subs:
            await asyncio.to_thread(sub.close)


def summarize(runs: list[dict[str, float]], key: str) -> tuple[float, float]:
    values = [run[key] for run in runs]
    return round(statistics.median(values), 2), round(max(values) - min(values), 2)


async def bench(subscribers: int, messages: int, count: int, rate: float) -> dict[str, object]:
    result: dict[str, object] = {
        "subscribers": subscribers,
        "messages": messages,
        "runs": count,
        "paced_rate": rate,
    }
    with tempfile.TemporaryDirectory(prefix="fanout-bench-mqtt-") as logs:
        cases: dict[str, list[dict[str, float]]] = {"mosquitto": [], "relay": [], "cluster": []}
        with throwaway_redis_cluster() as nodes, mosquitto() as mosquitto_ports:
            async with (
                fanout_relays(1, None, Path(logs) / "one") as relay_ports,
                fanout_relays(
                    3, f"{nodes[0][0]}:{nodes[0][1]}", Path(logs) / "three"
                ) as cluster_ports,
            ):
                lookups = []
                ports = {
                    "mosquitto": mosquitto_ports,
                    "relay": relay_ports,
                    "cluster": cluster_ports,
                }
                paced: dict[str, list[dict[str, float]]] = {case: [] for case in cases}
                for _ in range(count):  # the cases alternate, so that load falls on all alike
                    for case, runs in cases.items():
                        before = _hgetall_calls(nodes)
                        runs.append(await one_run(ports[case], subscribers, messages))
                        if case == "cluster":
                            lookups.append((_hgetall_calls(nodes) - before) / messages)
                        paced[case].append(
                            await one_run(ports[case], subscribers, int(rate * 2), rate)
                        )
        for case, runs in cases.items():
            median, spread = summarize(runs, "msgs_per_s")
            result[f"{case}_msgs_per_s"], result[f"{case}_msgs_per_s_spread"] = median, spread
            for key in ("p50_ms", "p99_ms"):
                median, spread = summarize(paced[case], key)
                result[f"{case}_{key}"], result[f"{case}_{key}_spread"] = median, spread
            result[f"{case}_delivered_fraction"] = min(
                run["delivered"] / (subscribers * messages) for run in runs
            )
        result["cluster_redis_lookups_per_msg"] = round(statistics.median(lookups), 3)
        result["note"] = (
            "the clients (one paho thread per subscriber, and the publisher) share the machine's"
            " cores with the brokers: burst throughput is bounded by them as much as by the"
            " brokers, and varies from run to run (see the spreads); on a shared machine the"
            " load of other work adds to that (load_average_1m)"
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=20)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=200.0, help="messages/s of latency runs")
    parser.add_argument("--no-save", action="store_true", help="do not write bench/results")
    parser.add_argument("--spatial", action="store_true", help="only the spatial part")
    parser.add_argument("--entities", type=int, default=20_000, help="spatial: entities")
    parser.add_argument("--start", type=int, default=500, help="spatial: first N")
    parser.add_argument("--limit", type=int, default=8000, help="spatial: largest N tried")
    parser.add_argument("--bisections", type=int, default=2, help="spatial: after doubling")
    parser.add_argument("--warmup", type=float, default=2.0, help="spatial: seconds before")
    parser.add_argument("--window", type=float, default=4.0, help="spatial: seconds measured")
    parser.add_argument("--processes", type=int, default=2, help="spatial: client processes")
    parser.add_argument("--logs", default="/tmp/fanout-bench-spatial", help="spatial: logs here")
    parser.add_argument(
        "--cases", nargs="+", choices=CASES, default=list(CASES), help="spatial: contenders"
    )
    parser.add_argument(
        "--quick", action="store_true", help="spatial: a smoke run (one run, short, coarse)"
    )
    args = parser.parse_args()
    if args.quick:
        args.runs, args.start, args.limit, args.bisections = 1, 100, 400, 0
        args.warmup, args.window = 1.0, 2.0
    calibration = calibrate()
    result: dict[str, object] = {}
    if not args.spatial:
        result = asyncio.run(bench(args.subscribers, args.messages, args.runs, args.rate))
    result.update(asyncio.run(spatial_runs(args)))
    path = SPATIAL_RESULTS if args.spatial else RESULTS
    if args.quick:
        path = path.with_name(path.stem + "_quick.json")
    write_results(
        {**result, "machine": describe(), "calibration": calibration},
        None if args.no_save else path,
    )


if __name__ == "__main__":
    main()
