"""A relay served by a leader and its workers (``relay.shell.workers``, ``fanout relay --workers``).

The pure parts: each process's configuration derived from the relay's, the checks of what
workers cannot do yet, the port held for them, and the leader's ``/metrics``, the workers'
summed (against sums taken by hand of what each rendered). One real deployment: a scripted
publisher and ``fanout relay --workers 2`` as a user starts it, with tokens required,
subscribers on its one port landing on both workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import pickle
import signal
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect as ws_connect

from fanout.auth import AuthConfig, issue
from fanout.cli.main import USAGE, main
from fanout.cli.relay import default_workers, worker_command, workers_count
from fanout.client import HandshakeRefused, connect
from fanout.errors import ConfigError
from fanout.launch import running
from fanout.metrics import Histogram, Sample, render, scrape
from fanout.mqtt import packets as mp
from fanout.mqtt.decoding import decode, split
from fanout.mqtt.encoding import encode
from fanout.relay.config import Cluster, Limits, Listening, Mqtt, Process, RelayConfig, Upstream
from fanout.relay.core.planner import IN_A_MAP, Policy
from fanout.relay.data.buffers import DoubleBuffer, Stamp
from fanout.relay.shell.sharedstate import PREFIX, SharedStore, sweep
from fanout.relay.shell.summing import merged, summed
from fanout.relay.shell.workers import Leader, leader_config, reserved, worker_config
from fanout.testing.catalog import catalog
from fanout.testing.ports import free_port
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.wait import eventually
from fanout.tiers import shared
from fanout.tiers.held import Below
from fanout.tiers.shared import SHARED_STATE
from fanout.views import Box
from fanout.wire.messages import Frame, Hello, Publish, Published

RELAY = RelayConfig(
    Upstream("ws://publisher:7700", token="relay-token", keepalive=7.0),
    name="edge",
    listening=Listening("0.0.0.0", 7701, serve_relays=True),
    limits=Limits(queue_limit=9),
    process=Process(workers=3, workers_port=7799),
    auth=AuthConfig("HS256", "s" * 32),
    mqtt=Mqtt(port=1883),
)


def test_a_worker_is_an_edge_relay_of_its_leader_on_the_relays_port() -> None:
    worker = worker_config(RELAY, 2, 7701, "ws://127.0.0.1:7799", "secret")
    assert worker.upstream == Upstream("ws://127.0.0.1:7799", token="secret", keepalive=7.0)
    assert worker.listening == dataclasses.replace(RELAY.listening, reuse_port=True)
    assert (worker.name, worker.process.workers) == ("edge-2", 1)
    assert (worker.mqtt, worker.cluster) == (Mqtt(), Cluster())  # MQTT, a map: the leader's
    assert (worker.limits, worker.auth, worker.policy) == (RELAY.limits, RELAY.auth, Policy())
    assert pickle.loads(pickle.dumps((2, worker))) == (2, worker)  # as it goes on stdin


def test_a_worker_of_a_relay_in_a_map_plans_as_the_relay_does() -> None:
    in_a_map = dataclasses.replace(RELAY, cluster=Cluster(registry="redis://r:6379"))
    worker = worker_config(in_a_map, 1, 7701, "ws://127.0.0.1:7799", "secret")
    assert worker.cluster == Cluster() and worker.policy == in_a_map.policy == IN_A_MAP


def test_the_leader_listens_on_loopback_for_its_workers_and_keeps_the_rest() -> None:
    leader = leader_config(RELAY)
    assert leader.listening == Listening("127.0.0.1", 7799, serve_relays=True)
    assert (leader.upstream, leader.mqtt, leader.auth) == (RELAY.upstream, RELAY.mqtt, RELAY.auth)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Process(workers=0), "workers must be >= 1"),
        (lambda: Process(workers_port=70000), "workers_port"),
    ],
)
def test_a_bad_process_section_is_refused(make: Callable[[], object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()


def test_a_worker_of_a_relay_that_forwards_serves_the_other_relays_of_the_map() -> None:
    forwarding = dataclasses.replace(
        RELAY,
        listening=dataclasses.replace(RELAY.listening, serve_relays=False),
        cluster=Cluster(registry="redis://r:6379", policy="forward"),
    )
    worker = worker_config(forwarding, 1, 7701, "ws://127.0.0.1:7799", "secret")
    assert worker.listening.serve_relays and worker.cluster == Cluster()
    alone = dataclasses.replace(forwarding, cluster=Cluster())
    assert not worker_config(alone, 1, 7701, "ws://127.0.0.1:7799", "s").listening.serve_relays


def test_auto_workers_are_the_cores_the_relay_may_run_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)
    assert (workers_count("auto"), workers_count("4")) == (3, 4)
    assert default_workers() == 3  # --workers not given: auto, in a map or not
    with pytest.raises(ValueError):
        workers_count("many")


def test_the_command_line_refuses_workers_it_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["relay", "--workers", "0"]) == USAGE
    with pytest.raises(SystemExit) as refused:  # argparse's own usage error
        main(["relay", "--workers", "many"])
    assert refused.value.code == USAGE
    monkeypatch.setenv("FANOUT_RELAY_WORKER", "true")  # the leader's own flag is no setting
    assert main(["relay"]) == USAGE


def test_a_worker_runs_the_relay_command_logging_as_its_leader_does() -> None:
    command = worker_command("debug", "json")
    assert command[1:5] == ["-m", "fanout", "relay", "--worker"]
    assert command[5:] == ["--log-level", "debug", "--log-format", "json"]


def test_the_leader_serves_mqtt_on_the_relays_host_and_workers_on_loopback() -> None:
    leader = Leader(RELAY, ["unused"])
    assert leader.mqtt is not None
    assert (leader.mqtt.listener.host, leader.mqtt.listener.port) == ("0.0.0.0", 1883)
    assert (leader.config.listening.host, leader.port) == ("127.0.0.1", None)  # not started


def test_a_leader_whose_shared_memory_fails_sends_rows_and_makes_its_workers_resync(
    tmp_path: Path,
) -> None:
    """No room to write a state (here: no directory at all): the leader says so once, and
    closes each worker reading shared memory, which connects again and is sent rows."""
    leader = Leader(RELAY, ["unused"])
    leader.shared = leader.relays.shared = SharedStore(tmp_path / "gone")
    leader.relays.below = {4: Below(4, "edge-1", shared=True), 5: Below(5, "other")}
    closed: list[int] = []
    leader.tiers.close = closed.append  # type: ignore[method-assign]
    leader.unshare()
    assert closed == [] and leader.relays.shared is not None  # nothing failed yet
    buffer = DoubleBuffer("id", {"id": "<i8", "x": "<f8", "y": "<f8"}, ("x", "y"))
    buffer.mark(Stamp(1, 0, 0, 0.0))
    buffer.swap()
    assert leader.shared.publish("agents", buffer) is None
    assert isinstance(leader.shared.failure, FileNotFoundError)
    leader.unshare()
    assert closed == [4] and leader.relays.shared is None
    hello = Hello(version=1, role="relay", name="edge-1", capabilities=[SHARED_STATE])
    assert not shared.welcome(leader.relays.shared, hello)  # rows from now on


def test_directories_of_leaders_that_were_killed_are_removed(tmp_path: Path) -> None:
    dead, alive = tmp_path / f"{PREFIX}999999999-x", tmp_path / f"{PREFIX}{os.getpid()}-y"
    dead.mkdir(), alive.mkdir()
    (dead / "0-0").write_bytes(b"state")
    sweep(tmp_path)
    assert not dead.exists() and alive.exists()


def test_the_port_is_held_for_the_workers_and_shared_by_them_alone() -> None:
    with reserved("127.0.0.1", 0) as port:
        with socket.socket() as stranger, pytest.raises(OSError):
            stranger.bind(("127.0.0.1", port))
        with socket.socket() as worker:
            worker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            worker.bind(("127.0.0.1", port))
            worker.listen()


BOUNDS = (0.01, 0.1, 1.0)
NAMES = ("relay_pushes", "relay_rows", "relay_upstream_connected")
one_worker = st.fixed_dictionaries(
    {
        "values": st.tuples(*(st.integers(0, 10**9) for _ in NAMES)),
        "observed": st.lists(st.sampled_from((0.005, 0.05, 0.5, 5.0)), max_size=20),
    }
)


def _rendered(values: tuple[int, ...], observed: list[float]) -> str:
    samples: list[Sample | Histogram] = [
        Sample(name, "counter" if i == 0 else "gauge", "h", value)
        for i, (name, value) in enumerate(zip(NAMES, values, strict=True))
    ]
    histogram = Histogram("relay_tick_to_push_seconds", "h", BOUNDS)
    for value in observed:
        histogram.observe(value)
    samples += [histogram, Sample("relay_worker", "gauge", "h", 1, {"worker": "1"})]
    return render(samples).decode()


@settings(max_examples=30, deadline=None)
@given(st.lists(one_worker, min_size=1, max_size=4))
def test_the_leaders_metrics_are_its_workers_summed(workers: list[dict[str, object]]) -> None:
    texts = [_rendered(w["values"], w["observed"]) for w in workers]  # type: ignore[arg-type]
    by_name = {sample.name: sample for sample in summed(texts)}
    for i, name in enumerate(NAMES[:2]):
        total = sum(w["values"][i] for w in workers)  # type: ignore[index]
        assert by_name[name].value == total  # type: ignore[union-attr]
    assert "relay_upstream_connected" not in by_name  # the leader's own link, not a sum
    assert "relay_worker" not in by_name
    histogram = by_name["relay_tick_to_push_seconds"]
    assert isinstance(histogram, Histogram)
    every = [value for w in workers for value in w["observed"]]  # type: ignore[attr-defined]
    assert histogram.count == len(every)
    assert histogram.counts == [
        sum(1 for v in every if v == bucket) for bucket in (0.005, 0.05, 0.5, 5.0)
    ]
    assert histogram.total == pytest.approx(sum(every))
    assert by_name["relay_workers_cpu_seconds"].value >= 0  # type: ignore[union-attr]
    own: list[Sample | Histogram] = [
        Sample("relay_upstream_connected", "gauge", "h", 1),
        Sample("relay_pushes", "counter", "h", 5),
        Sample("mqtt_clients", "gauge", "h", 3),
    ]
    answer = {sample.name: sample for sample in merged(own, summed(texts))}
    assert answer["relay_upstream_connected"].value == 1  # type: ignore[union-attr]
    assert answer["relay_pushes"].value == by_name["relay_pushes"].value  # type: ignore[union-attr]
    assert answer["mqtt_clients"].value == 3  # type: ignore[union-attr]


# -- a real deployment -------------------------------------------------------------------------

BOX = Box((0, 0), (100, 100))
#: The leader's count of subscribers' connections on each worker (label ``worker``).
WORKER_CONNECTIONS = "fanout_relay_connections_by_worker{"
ROWS = 20
SECRET = "workers-test-secret-of-32-bytes!"
#: Every other subscriber's token confines it to the agents with x <= 40.5.
TOKENS = [
    issue("HS256", SECRET, ["subscriber", "producer"]),
    issue("HS256", SECRET, ["subscriber", "producer"], rules={"agents": "box:0,0,40.5,100"}),
]
ADMIN = issue("HS256", SECRET, ["admin"])


def _tick(seq: int) -> dict[str, list[float]]:
    """The agents at ``seq``: all inside ``BOX``, moving."""
    ids = list(range(ROWS))
    return {"id": ids, "x": [float(i * 4 + seq % 7) for i in ids], "y": [float(seq % 50)] * ROWS}


def _rows(seq: int, ruled: bool) -> dict[int, dict[str, float]]:
    """The rows a subscriber sees at ``seq``, under the rules of its token or not."""
    rows = zip(*_tick(seq).values(), strict=True)
    return {r: {"id": r, "x": x, "y": y} for r, x, y in rows if x <= 40.5 or not ruled}


async def _publish(publisher: ScriptedPublisher, stop: asyncio.Event) -> None:
    while not stop.is_set():
        seq = publisher.next_seq.get("agents", 0)
        await publisher.send(_tick(seq), snapshots=publisher.take_fresh())
        await asyncio.sleep(0.1)


def _datasets(url: str, token: str) -> list[tuple[str, int]]:
    """``GET /v1/datasets`` on the relay's port, with ``token``."""
    request = urllib.request.Request(
        url.replace("ws://", "http://") + "/v1/datasets",
        headers={"Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return [(d["name"], d["rows_held"]) for d in json.loads(answer.read())["datasets"]]


def _admin(url: str, target: str, token: str = ADMIN) -> dict[str, Any]:
    """``GET target`` of the admin API on the relay's port, with ``token``."""
    request = urllib.request.Request(
        url.replace("ws://", "http://") + target, headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return dict(json.loads(answer.read()))


async def _admin_of_the_relay(url: str, subscriptions: int) -> None:
    """The admin API answers for the whole relay, whichever worker is asked: every worker's
    subscriptions, batches and coverage; the token is checked as on one process."""
    for _ in range(4):
        listed = await asyncio.to_thread(_admin, url, "/v1/admin/subscribers?top=1000")
        assert listed["subscriptions"] == subscriptions, listed
        assert {entry["worker"] for entry in listed["top"]} == {1, 2}
        assert listed["workers_unanswered"] == []
    batches = (await asyncio.to_thread(_admin, url, "/v1/admin/batches"))["batches"]
    assert any(b["workers_swapped_last"] and b["pushed_last"] for b in batches), batches[-3:]
    explained = await asyncio.to_thread(
        _admin, url, "/v1/admin/explain?dataset=agents&view=box:0,0,100,100"
    )
    assert explained["covered"]  # the leader holds it of the publisher
    assert [(w["worker"], w["covered"]) for w in explained["workers"]] == [(1, True), (2, True)]
    with pytest.raises(urllib.error.HTTPError) as refused:  # not an admin's token
        await asyncio.to_thread(_admin, url, "/v1/admin/batches", TOKENS[0])
    refused.value.close()
    assert refused.value.code == HTTPStatus.FORBIDDEN


async def _on_both_workers(stack: contextlib.AsyncExitStack, url: str) -> list[Any]:
    """Subscribers to ``BOX``, tokens alternating, until connections landed on both workers
    (the kernel picks): [(subscriber, view, ruled)]."""
    subscribers: list[Any] = []
    while True:
        ruled = len(subscribers) % 2 == 1
        subscriber = await stack.enter_async_context(connect(url, token=TOKENS[ruled]))
        subscribers.append((subscriber, await subscriber.subscribe(BOX, rate=100), ruled))
        values = await asyncio.to_thread(scrape, url)  # the relay's, whichever worker answers
        assert values["fanout_relay_connections"] == len(subscribers)  # every worker's, summed
        counts = {k: v for k, v in values.items() if k.startswith(WORKER_CONNECTIONS)}
        if len(subscribers) >= 40 or (len(subscribers) >= 4 and min(counts.values(), default=0)):
            assert len(counts) == 2 and min(counts.values()) >= 1, counts
            assert sum(counts.values()) == len(subscribers)
            return subscribers


def _on_each_worker(url: str) -> dict[str, float]:
    """The subscribers' connections on each worker, by its label (the relay's ``/metrics``)."""
    return {k: v for k, v in scrape(url).items() if k.startswith(WORKER_CONNECTIONS)}


async def _resumed_on_the_other_worker(url: str, publisher: ScriptedPublisher) -> None:
    """An ``every`` view resumed on a connection that landed on the other worker continues
    after its seq: each seq once, in order, while the publisher ticks."""
    async with contextlib.AsyncExitStack() as stack:
        before = await asyncio.to_thread(_on_each_worker, url)
        first = await stack.enter_async_context(connect(url, token=TOKENS[0]))
        now = await asyncio.to_thread(_on_each_worker, url)
        worker = next(k for k, v in now.items() if v > before.get(k, 0))
        view = await first.subscribe(BOX, mode="every", rate=100)
        stop = asyncio.Event()
        ticking = asyncio.create_task(_publish(publisher, stop))
        target = publisher.next_seq["agents"] + 2
        await asyncio.wait_for(_until_seq(view, target), 30)
    async with contextlib.AsyncExitStack() as stack:  # the first connection closed
        for _ in range(40):  # until the kernel puts one on the other worker
            before = await asyncio.to_thread(_on_each_worker, url)
            again = await stack.enter_async_context(connect(url, token=TOKENS[0]))
            now = await asyncio.to_thread(_on_each_worker, url)
            if next(k for k, v in now.items() if v > before.get(k, 0)) != worker:
                break
        else:
            raise AssertionError("no connection landed on the other worker")
        seqs, after = [], view.seq
        resumed = await again.subscribe(BOX, mode="every", rate=100, resume=view)
        async for update in resumed:
            seqs.append(update.seq)
            if update.seq >= after + 5:
                break
        stop.set()
        await ticking
        assert seqs == list(range(after + 1, after + 1 + len(seqs))), (after, seqs)
        assert resumed.rows == _rows(seqs[-1], ruled=False)
        assert (resumed.gaps, resumed.resyncs) == (0, 0)


async def _mqtt_over_the_port(url: str) -> None:
    """Two MQTT clients over WebSockets on the relay's port, each carried by whichever worker
    took it to the leader's broker: one's message reaches the other's subscription."""
    mqtt = url + "/mqtt"
    async with ws_connect(mqtt) as reader, ws_connect(mqtt) as writer:
        for client, name in ((reader, "reader"), (writer, "writer")):
            login = mp.Connect(name, mp.V5, username=name, password=TOKENS[0].encode())
            await client.send(encode(login, mp.V5))
            assert isinstance(await _packet(client), mp.ConnAck)
        await reader.send(encode(mp.Subscribe(1, (("w/#", 1),)), mp.V5))
        assert await _packet(reader) == mp.SubAck(1, (1,))
        await writer.send(encode(mp.Publish("w/1", b"through a worker", 1, packet_id=1), mp.V5))
        assert isinstance(await _packet(writer), mp.PubAck)
        got = await _packet(reader)
        assert isinstance(got, mp.Publish) and (got.topic, got.payload) == (
            "w/1",
            b"through a worker",
        )
        for _ in range(4):  # the broker's pages, asked of the leader by whichever worker
            listed = await asyncio.to_thread(_admin, url, "/v1/mqtt/clients")
            assert sorted(c["client_id"] for c in listed["clients"]) == ["reader", "writer"]


async def _packet(client: Any) -> mp.Packet:
    """The next MQTT packet from ``client`` (a WebSocket), within 10 s."""
    received = b""
    while (found := split(received, 1 << 20)) is None:
        received += await asyncio.wait_for(client.recv(), 10)
    assert found[2] == len(received), "one packet a message here"
    return decode(found[0], found[1], mp.V5)


@pytest.mark.integration
@pytest.mark.no_spark_publisher
@pytest.mark.parametrize("shared", [True, False], ids=["shared-memory", "rows"])
async def test_two_workers_serve_one_port_with_one_link_upstream(
    tmp_path: Path, shared: bool
) -> None:
    """Subscribers on both workers see the same rows (each as its token's rules allow), in
    mode ``latest`` and ``every`` (each seq once, in order), write through them, read the HTTP
    API; the publisher sees one relay; the leader sums the workers' metrics and restarts one
    killed. The leader's state reaches the workers in shared memory (the default), or as rows
    (``--no-shared-state``): the same to the subscribers."""
    frames: list[Frame] = []
    publisher = ScriptedPublisher(catalog(), on_frame=frames.append)
    stop = asyncio.Event()
    leader_port, secret = free_port(), tmp_path / "secret"
    secret.write_text(SECRET)
    async with serving(publisher) as upstream, contextlib.AsyncExitStack() as stack:
        ticking = asyncio.create_task(_publish(publisher, stop))
        args = ["--publisher", upstream, "--port", "0", "--workers", "2"]
        args += ["--workers-port", str(leader_port), "--auth-key-file", str(secret)]
        args += ["--mqtt-port", "0", "--mqtt-websocket"]
        args += [] if shared else ["--no-shared-state"]
        relay = await stack.enter_async_context(running("relay", args, tmp_path / "relay.log"))
        with pytest.raises(HandshakeRefused):  # a worker checks tokens
            await stack.enter_async_context(connect(relay.url))
        subscribers = await _on_both_workers(stack, relay.url)
        everies = [(await s.subscribe(BOX, mode="every"), ruled) for s, _, ruled in subscribers]
        # Their first push while the publisher still ticks: the scripted publisher answers the
        # workers' acquisitions with its next tick, so stopping first left them without rows.
        for _, view, _ in subscribers:
            await asyncio.wait_for(_until_seq(view, 0), 30)
        stop.set()
        await ticking
        last = publisher.next_seq["agents"] - 1
        for _, view, _ in subscribers:  # bounded: a hang fails instead of waiting for ever
            try:
                await asyncio.wait_for(_until_seq(view, last), 30)
            except TimeoutError:
                seqs = [v.seq for _, v, _ in subscribers]
                raise AssertionError(f"views at seqs {seqs}, not at the last, {last}") from None
        assert all(view.rows == _rows(last, ruled) for _, view, ruled in subscribers)
        for every, ruled in everies:  # from the leader's window where the state was shared
            await asyncio.wait_for(_until_seq(every, last), 30)
            assert every.rows == _rows(last, ruled)
            assert (every.gaps, every.resyncs) == (0, 0)
        await _resumed_on_the_other_worker(relay.url, publisher)
        assert publisher.connections == 1  # the leader's link: the publisher sees one relay
        leader = scrape(f"http://127.0.0.1:{leader_port}")
        assert (leader["fanout_relay_shared_states_total"] > 0) == shared
        for _ in range(4):  # the HTTP API, whichever worker answers
            # the rows the relay holds: the leader's, whichever worker was asked
            assert await asyncio.to_thread(_datasets, relay.url, TOKENS[0]) == [("agents", ROWS)]
        with pytest.raises(urllib.error.HTTPError) as refused:  # the leader checks the token
            await asyncio.to_thread(_datasets, relay.url, "not-a-token")
        refused.value.close()
        assert refused.value.code == HTTPStatus.UNAUTHORIZED
        await _admin_of_the_relay(relay.url, 2 * len(subscribers))  # BOX and every, each
        # Every subscriber writes (outside the box): each write reaches the publisher through
        # its worker and the leader, and the publisher's answer comes back the same way.
        write = {"id": 99, "x": 500.0, "y": 500.0}
        writes = [asyncio.create_task(s.publish("agents", [write])) for s, _, _ in subscribers]
        published = await eventually(
            lambda: [frame for frame in frames if isinstance(frame, Publish)],
            lambda got: len(got) == len(subscribers),
            timeout=10,
            what="every write at the publisher",
        )
        for at, publish in enumerate(published):
            await publisher.broadcast(Published(publish.req, at, at))
        answers = await asyncio.wait_for(asyncio.gather(*writes), 30)
        assert sorted(answers) == [(at, at) for at in range(len(writes))]
        await _mqtt_over_the_port(relay.url)
        carried = "fanout_relay_mqtt_websockets_carried_total"
        assert scrape(relay.url)[carried] == 2  # read now, through a worker: its leader's sum
        await _restarted(relay.url, relay.pid, leader_port, len(subscribers), publisher)
        children = Path(f"/proc/{relay.pid}/task/{relay.pid}/children")
        workers = (await asyncio.to_thread(children.read_text)).split()
        relay.kill()  # however the leader ends, its workers end with it
        await eventually(
            lambda: [pid for pid in workers if _running(int(pid))],
            lambda running: not running,
            timeout=10,
            what="the workers ending with their leader",
        )


async def _until_seq(view: Any, seq: int) -> None:
    """Read ``view``'s updates until it is at ``seq`` or later."""
    if view.seq >= seq:
        return
    async for update in view:
        if update.seq >= seq:
            return


def _running(pid: int) -> bool:
    """Whether process ``pid`` runs (exists and is no zombie)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def _restarted(
    url: str, pid: int, leader_port: int, subscribers: int, publisher: ScriptedPublisher
) -> None:
    """The leader's ``/metrics`` sums its workers'; one killed is restarted, and the port
    serves after, whichever worker answers."""
    leader = f"http://127.0.0.1:{leader_port}"
    await eventually(
        lambda: scrape(leader).get("fanout_relay_connections", 0),
        lambda summed: summed == subscribers,
        timeout=10,
        what="the leader's /metrics summing the workers' connections",
    )
    children = Path(f"/proc/{pid}/task/{pid}/children")
    workers = (await asyncio.to_thread(children.read_text)).split()
    os.kill(int(workers[0]), signal.SIGKILL)
    await eventually(
        lambda: scrape(leader),
        lambda values: (
            values.get("fanout_relay_worker_restarts_total") == 1
            and values.get("fanout_relay_workers") == 2
        ),
        timeout=30,
        what="the worker restarted",
    )
    stop = asyncio.Event()
    ticking = asyncio.create_task(_publish(publisher, stop))
    for _ in range(4):
        async with connect(url, token=TOKENS[0]) as late:
            view = await late.subscribe(BOX, rate=100)
            update = await asyncio.wait_for(view.__aiter__().__anext__(), 10)
            assert update.full and len(view.rows) == ROWS
    stop.set()
    await ticking
