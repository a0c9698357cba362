"""``GET /metrics`` on a WebSocket server's own port, read back by Prometheus' own parser."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from fanout.metrics import Sample, process_of, render, route, scrape

SAMPLES = [
    Sample("relay_pushes", "counter", "Pushes sent.", 7),
    Sample("relay_rows", "gauge", "Rows held.", 2.5),
    Sample("publisher_relay_bytes_sent", "counter", "Bytes.", 10, {"relay": "1", "name": 'a"b'}),
    Sample("publisher_relay_bytes_sent", "counter", "Bytes.", 20, {"relay": "2", "name": "c"}),
]


def test_samples_render_as_families_prometheus_parses_back() -> None:
    families = {f.name: f for f in text_string_to_metric_families(render(SAMPLES).decode())}
    assert families["fanout_relay_pushes"].type == "counter"
    assert families["fanout_relay_rows"].type == "gauge"
    pushes = families["fanout_relay_pushes"].samples
    assert [(s.name, s.value) for s in pushes] == [("fanout_relay_pushes_total", 7.0)]
    sent = families["fanout_publisher_relay_bytes_sent"].samples
    assert [(s.labels, s.value) for s in sent] == [
        ({"relay": "1", "name": 'a"b'}, 10.0),  # a quote in a label value, escaped and back
        ({"relay": "2", "name": "c"}, 20.0),
    ]


async def echo(websocket: ServerConnection) -> None:
    async for message in websocket:
        await websocket.send(message)


async def test_get_metrics_is_answered_on_the_websocket_port_which_still_serves_websockets() -> (
    None
):
    calls = []

    def samples() -> list[Sample]:
        calls.append(1)
        return [Sample("relay_pushes", "counter", "Pushes sent.", len(calls))]

    async with serve(echo, "127.0.0.1", 0, process_request=route(samples)) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        first = await asyncio.to_thread(scrape, f"ws://127.0.0.1:{port}")
        second = await asyncio.to_thread(scrape, f"ws://127.0.0.1:{port}")
        assert (first["fanout_relay_pushes_total"], second["fanout_relay_pushes_total"]) == (1, 2)
        assert [name for name in first if name.startswith("fanout_")] == [
            "fanout_relay_pushes_total"
        ]
        url = f"http://127.0.0.1:{port}/metrics"
        response = await asyncio.to_thread(urllib.request.urlopen, url, timeout=10)
        with response:  # the format's own content type
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        with pytest.raises(urllib.error.HTTPError) as refused:  # any other path: no WebSocket
            await asyncio.to_thread(
                urllib.request.urlopen, f"http://127.0.0.1:{port}/other", timeout=10
            )
        refused.value.close()
        assert refused.value.code == 426
        async with connect(f"ws://127.0.0.1:{port}") as websocket:
            await websocket.send(b"still a websocket server")
            assert await websocket.recv() == b"still a websocket server"


def test_a_histogram_renders_cumulative_buckets_and_build_info_its_version() -> None:
    from fanout.metrics import Histogram, build_info

    latency = Histogram("relay_tick_to_push_seconds", "Seconds.", bounds=(0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 3.0):
        latency.observe(value)
    text = render([latency, build_info("relay")]).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    histogram = families["fanout_relay_tick_to_push_seconds"]
    assert histogram.type == "histogram"
    values = {(s.name, s.labels.get("le")): s.value for s in histogram.samples}
    assert values[("fanout_relay_tick_to_push_seconds_bucket", "0.1")] == 2  # 0.1 counts in 0.1
    assert values[("fanout_relay_tick_to_push_seconds_bucket", "1.0")] == 3
    assert values[("fanout_relay_tick_to_push_seconds_bucket", "+Inf")] == 4
    assert values[("fanout_relay_tick_to_push_seconds_count", None)] == 4
    assert values[("fanout_relay_tick_to_push_seconds_sum", None)] == pytest.approx(3.65)
    (info,) = families["fanout_build_info"].samples
    assert info.value == 1 and info.labels["role"] == "relay" and info.labels["version"]


async def test_every_port_serving_metrics_shows_the_process_own_figures() -> None:
    """prometheus_client's process and platform collectors: what ``ulimit -n`` and a memory
    leak are watched with (docs/operations.md)."""
    async with serve(echo, "127.0.0.1", 0, process_request=route(list)) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        values = await asyncio.to_thread(scrape, f"ws://127.0.0.1:{port}")
    assert values["process_resident_memory_bytes"] > 0
    assert values["process_cpu_seconds_total"] > 0
    assert 0 < values["process_open_fds"] <= values["process_max_fds"]
    assert values["process_start_time_seconds"] > 0
    assert any(name.startswith("python_info{") for name in values)
    assert any(name.startswith("python_gc_collections_total{") for name in values)


def test_another_process_figures_come_under_their_own_prefix() -> None:
    """``process_of``: how the publisher shows its Spark driver JVM's memory and CPU."""
    # The child says when it runs its own code: read just after ``exec``, before the child ran,
    # a process's resident memory can still read 0 (CI saw it once).
    script = "import sys, time; print('ready', flush=True); time.sleep(60)"
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE) as child:
        try:
            assert child.stdout is not None and child.stdout.readline() == b"ready\n"
            text = render([], [process_of(child.pid, "fanout_publisher_jvm")]).decode()
        finally:
            child.kill()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    (memory,) = families["fanout_publisher_jvm_process_resident_memory_bytes"].samples
    (own,) = families["process_resident_memory_bytes"].samples
    assert memory.value > 0 and own.value > 0
    (started,) = families["fanout_publisher_jvm_process_start_time_seconds"].samples
    (own_start,) = families["process_start_time_seconds"].samples
    assert started.value >= own_start.value  # the child's, started after this process
