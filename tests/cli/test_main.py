"""The ``fanout`` command line: every command explains itself; explain prints coverage;
usage errors exit 2 and failures 1; subscribe prints strict JSON in the dataset's language."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from websockets.asyncio.server import ServerConnection, serve

import fanout
from fanout.cli.main import FAILURE, USAGE, _parser, main
from fanout.cli.relay import RELAY_LIMITS, _limits_given
from fanout.cli.relaymqtt import MQTT_LIMITS
from fanout.cli.settings import fields_given
from fanout.views import Box
from fanout.views.sql import Sql
from fanout.views.topic import TopicFilter
from fanout.wire import codec
from fanout.wire.columns import encode_columns
from fanout.wire.messages import (
    PROTOCOL_VERSION,
    Error,
    Hello,
    Push,
    Subscribe,
    Subscribed,
    Welcome,
)

COMMANDS = ["demo", "publisher", "relay", "subscribe", "explain", "datasets", "publish", "token"]


def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert command in out


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_useful_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "--log-level" in out
    assert len(out.splitlines()) > 8


def test_explain_prints_coverage_and_residual(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["explain", "--view", "box:0,0,10,10", "--have", "box:0,0,5,10"])
    out = capsys.readouterr().out
    assert status == 0
    assert "not covered" in out
    assert "box:5,0,10,10" in out


def test_explain_of_a_covered_view(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--view", "sphere:5,5,1", "--have", "box:0,0,10,10"]) == 0
    assert "result: covered" in capsys.readouterr().out


def test_a_bad_view_is_a_clear_error_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--view", "box:0,0,oops,1"]) == USAGE
    err = capsys.readouterr().err
    assert err.startswith("fanout explain: ")
    assert "Traceback" not in err


def test_explain_needs_a_kind_for_datasets_not_built_in(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--dataset", "orders", "--view", "a/b"]) == 2
    assert "--kind" in capsys.readouterr().err
    assert (
        main(
            ["explain", "--dataset", "orders", "--kind", "topic", "--view", "a/b", "--have", "a/#"]
        )
        == 0
    )


def test_subscribe_to_a_relay_that_is_not_there_fails_cleanly() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "fanout",
            "subscribe",
            "--relay",
            "ws://127.0.0.1:9",
            "--box",
            "0,0,1,1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == FAILURE
    assert "Traceback" not in result.stderr
    assert "fanout subscribe:" in result.stderr


def test_subscribe_tries_each_relay_given_then_fails_cleanly() -> None:
    result = subprocess.run(
        [
            *(sys.executable, "-m", "fanout", "subscribe", "--mode", "every", "--box", "0,0,1,1"),
            *("--relay", "ws://127.0.0.1:9,ws://127.0.0.1:11"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == FAILURE
    assert "Traceback" not in result.stderr
    assert "trying ws://127.0.0.1:11" in result.stderr
    assert "fanout subscribe:" in result.stderr


async def test_subscribe_moves_on_from_a_full_relay(capsys: pytest.CaptureFixture[str]) -> None:
    async def full(websocket: ServerConnection) -> None:
        await websocket.recv()  # its Hello
        await websocket.send(codec.encode(Error("unavailable", "no room here")))

    async with serve(full, "127.0.0.1", 0) as server:
        url = f"ws://127.0.0.1:{next(iter(server.sockets)).getsockname()[1]}"
        argv = ["subscribe", "--relay", f"{url},ws://127.0.0.1:9", "--box", "0,0,1,1"]
        assert await asyncio.to_thread(main, argv) == FAILURE
    err = capsys.readouterr().err
    assert f"relay {url}: unavailable: no room here; trying ws://127.0.0.1:9" in err
    assert err.strip().endswith("fanout subscribe: unavailable: no room here")  # tried both


def test_subscribe_parses_the_view_in_the_kind_given(capsys: pytest.CaptureFixture[str]) -> None:
    relay = ["subscribe", "--relay", "ws://127.0.0.1:9"]
    assert main([*relay, "--kind", "sql", "--box", "0,0,1,1"]) == 2
    assert "--box is a region; give the sql view with --view" in capsys.readouterr().err
    assert main([*relay, "--kind", "sql", "--view", "SELECT id FROM t WHERE"]) == 2
    assert capsys.readouterr().err.startswith("fanout subscribe: invalid SQL")
    assert main([*relay, "--kind", "topic", "--view", "a/#/b"]) == 2
    assert "'#' must be the last level" in capsys.readouterr().err
    assert main([*relay, "--kind", "topic", "--view", "a/#"]) == FAILURE  # valid; no relay there
    assert "fanout subscribe:" in capsys.readouterr().err


def test_subscribe_without_a_relay_url_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["subscribe", "--relay", " , ", "--box", "0,0,1,1"]) == 2
    assert "give at least one relay URL" in capsys.readouterr().err


def test_a_bad_widening_policy_is_refused_before_the_relay_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for bad in ("-1", "nan"):
        assert main(["relay", "--port", "0", "--widen", "enclose", "--overshoot", bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("fanout relay: policy:") and "overshoot" in err


def _first_relay_tried(route: list[str]) -> str:
    """Run ``fanout subscribe`` against relays that are not there; the relay it tried first."""
    result = subprocess.run(
        [*(sys.executable, "-m", "fanout", "subscribe", "--box", "500,500,510,510"), *route],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == FAILURE
    assert "Traceback" not in result.stderr
    return result.stderr.split(": ", 1)[0]


def test_subscribe_routed_by_area_or_by_key_tries_the_relays_in_that_ranking() -> None:
    from fanout.client import rank
    from fanout.views import Box

    relays = ["ws://127.0.0.1:9", "ws://127.0.0.1:11", "ws://127.0.0.1:13"]
    view = Box((500, 500), (510, 510))
    by_area = rank(relays, view, 64.0)[0]
    # a key whose first relay is not the area's, so that the two routes are told apart
    key = next(f"poi-{i}" for i in range(100) if rank(relays, view, key=f"poi-{i}")[0] != by_area)
    by_key = rank(relays, view, key=key)[0]
    listed = ("--relay", ",".join(relays))
    assert _first_relay_tried([*listed, "--route", "area", "--area", "64"]) == f"relay {by_area}"
    assert _first_relay_tried([*listed, "--route", "key", "--key", key]) == f"relay {by_key}"


def test_a_routing_key_needs_route_key_and_route_key_needs_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    box = ["subscribe", "--box", "0,0,1,1"]
    assert main([*box, "--route", "key"]) == 2
    assert "--route key needs --key" in capsys.readouterr().err
    assert main([*box, "--key", "goal-3"]) == 2
    assert "add --route key" in capsys.readouterr().err


def test_a_transducer_that_is_not_one_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    box = ["subscribe", "--relay", "ws://127.0.0.1:9", "--box", "0,0,1,1"]
    assert main([*box, "--transduce", '{"params": {}}']) == 2
    err = capsys.readouterr().err
    assert "--transduce" in err and "not a transducer" in err and "required field `name`" in err


def test_the_demo_lets_a_micro_batch_take_a_minute_of_ticks_and_passes_it_on() -> None:
    from fanout.cli.main import _parser
    from fanout.cli.publisher import simulation
    from fanout.demo import DemoConfig, _publisher_args

    demo = simulation(_parser().parse_args(["demo"]))
    publisher = simulation(_parser().parse_args(["publisher", "--max-ticks-per-batch", "7"]))
    assert (demo.max_ticks_per_batch, publisher.max_ticks_per_batch) == (600, 7)
    args = _publisher_args(DemoConfig(simulation=demo), Path("/tmp/state"))
    assert args[args.index("--max-ticks-per-batch") + 1] == "600"


@pytest.mark.parametrize("store", [None, "rocksdb"])
def test_the_publishers_built_in_dataset_takes_its_state_store_from_the_flag(
    monkeypatch: pytest.MonkeyPatch, store: str | None
) -> None:
    import fanout.publisher.app
    from fanout.cli.publisher import run_publisher

    seen = []
    monkeypatch.setattr(fanout.publisher.app, "run", lambda settings: seen.append(settings) or 0)
    flags = ["publisher"] if store is None else ["publisher", "--state-store", store]
    assert run_publisher(_parser().parse_args(flags)) == 0
    assert seen[0].datasets["agents"].state_store == (store or "hdfs")
    with pytest.raises(SystemExit):
        _parser().parse_args(["publisher", "--state-store", "leveldb"])


def test_the_relay_limit_flags_default_to_relay_config_and_reach_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fanout.relay.config import Limits

    defaults = Limits()
    for flag, kind, default, _ in RELAY_LIMITS:
        field = flag[2:].replace("-", "_")
        assert getattr(defaults, field) == default and type(getattr(defaults, field)) is kind
    args = _parser().parse_args(["relay", "--sql-share", "0.5", "--max-subscriptions", "7"])
    assert _limits_given(args) == {"sql_share": 0.5, "max_subscriptions": 7}
    assert main(["relay", "--port", "0", "--read-burst", "0"]) == 2
    assert capsys.readouterr().err.strip() == "fanout relay: read_burst must be >= 1 frame, not 0"


def test_the_mqtt_limit_flags_default_to_the_brokers_limits_and_reach_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fanout.mqtt.actions import Limits

    defaults = Limits()
    for flag, kind, default, _ in MQTT_LIMITS:
        field = flag[len("--mqtt-") :].replace("-", "_")
        assert getattr(defaults, field) == default and type(getattr(defaults, field)) is kind
    args = _parser().parse_args(["relay", "--mqtt-port", "0", "--mqtt-max-queued", "5"])
    assert args.mqtt_port == 0
    assert fields_given(args, MQTT_LIMITS, "--mqtt-") == {"max_queued": 5}
    assert main(["relay", "--port", "0", "--mqtt-receive-maximum", "0"]) == 2
    assert "mqtt receive_maximum must be in [1, 65535], not 0" in capsys.readouterr().err


def test_mqtt_addresses_must_be_host_and_port(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["relay", "--mqtt-peer-advertise", "relay-a.example:7883"])
    assert args.mqtt_peer_advertise == "relay-a.example:7883"
    for bad in ("relay-a.example", ":7883", "relay-a.example:0", "relay-a.example:port"):
        for flag in ("--mqtt-peer-advertise", "--mqtt-redis"):
            with pytest.raises(SystemExit) as exited:
                _parser().parse_args(["relay", flag, bad])
            assert exited.value.code == USAGE
            assert f"{bad!r} is not HOST:PORT" in capsys.readouterr().err


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"fanout {fanout.__version__}"


def test_usage_errors_exit_2_and_failures_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:  # argparse's own: an unknown flag
        main(["subscribe", "--box", "0,0,1,1", "--no-such-flag"])
    assert exit_.value.code == USAGE
    # ours: a bad view, a bad flag value, flags that do not go together
    assert main(["subscribe", "--relay", "ws://127.0.0.1:9", "--box", "0,0,oops,1"]) == USAGE
    assert main(["relay", "--port", "0", "--sql-share", "2"]) == USAGE
    assert main(["subscribe", "--box", "0,0,1,1", "--kind", "topic"]) == USAGE
    assert main(["explain", "--dataset", "orders", "--view", "a/b"]) == USAGE
    capsys.readouterr()
    # running fails: no relay listens there
    assert main(["subscribe", "--relay", "ws://127.0.0.1:9", "--box", "0,0,1,1"]) == FAILURE
    assert capsys.readouterr().err.splitlines()[-1].startswith("fanout subscribe: ")


#: A push whose rows hold every float JSON has no number for.
NON_FINITE = {"id": np.array([1, 2, 3]), "value": np.array([math.nan, math.inf, -math.inf])}


@contextlib.asynccontextmanager
async def scripted_relay(datasets: dict[str, str]) -> AsyncIterator[tuple[str, list[object]]]:
    """A relay on loopback whose ``Welcome`` names ``datasets``; it answers every subscription
    with one full push of ``NON_FINITE``. Yields its URL and the frames it received."""
    received: list[object] = []

    async def relay(websocket: ServerConnection) -> None:
        received.append(codec.to_relay().decode(await websocket.recv()))
        await websocket.send(codec.encode(Welcome(PROTOCOL_VERSION, "scripted", "s", datasets)))
        async for message in websocket:
            request = codec.to_relay().decode(message)
            received.append(request)
            if isinstance(request, Subscribe):
                await websocket.send(codec.encode(Subscribed(request.sub, "id", ["id", "value"])))
                rows, keys = encode_columns(NON_FINITE), encode_columns({"id": np.zeros(0, int)})
                push = Push(request.sub, 1, 5, 9, 0.0, True, rows, keys, keys)
                await websocket.send(codec.encode(push))

    async with serve(relay, "127.0.0.1", 0) as server:
        yield f"ws://127.0.0.1:{next(iter(server.sockets)).getsockname()[1]}", received


def _strict(line: str) -> object:
    """``line`` parsed as JSON that holds no NaN nor Infinity (which Python's json accepts)."""

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(line, parse_constant=refuse)


async def test_subscribe_json_is_strict_json_with_null_for_non_finite_floats(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with scripted_relay({"agents": "space"}) as (url, _):
        argv = ["subscribe", "--relay", url, "--box", "0,0,1,1", "--count", "1", "--json"]
        assert await asyncio.to_thread(main, argv) == 0
    (line,) = capsys.readouterr().out.splitlines()
    update = _strict(line)
    assert update == {
        "tick": 9,
        "seq": 5,
        "epoch": 1,
        "full": True,
        "entered": [{"id": 1, "value": None}, {"id": 2, "value": None}, {"id": 3, "value": None}],
        "updated": [],
        "left": [],
    }


@pytest.mark.parametrize(
    ("index", "text", "expected"),
    [
        ("topic", "plant/+/temp", TopicFilter),
        ("sql", "SELECT id, value FROM readings WHERE value > 1", Sql),
        ("space", "box:0,0,10,10", Box),
    ],
)
async def test_subscribe_takes_the_views_kind_from_the_dataset(
    index: str, text: str, expected: type, capsys: pytest.CaptureFixture[str]
) -> None:
    async with scripted_relay({"readings": index, "agents": "space"}) as (url, received):
        argv = ["subscribe", "--relay", url, "--dataset", "readings", "--view", text]
        assert await asyncio.to_thread(main, [*argv, "--count", "1"]) == 0
    assert "tick 9 seq 5: full, 3 changed, 3 rows" in capsys.readouterr().out
    (subscribe,) = [frame for frame in received if isinstance(frame, Subscribe)]
    assert isinstance(subscribe.view, expected) and subscribe.dataset == "readings"


async def test_subscribe_without_kind_to_a_dataset_the_relay_does_not_serve_fails(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with scripted_relay({"agents": "space"}) as (url, received):
        argv = ["subscribe", "--relay", url, "--dataset", "nope", "--view", "a/b"]
        assert await asyncio.to_thread(main, argv) == FAILURE
    assert "unknown dataset 'nope' (known: agents)" in capsys.readouterr().err
    assert [type(frame) for frame in received] == [Hello]  # nothing subscribed


async def test_subscribe_without_kind_to_a_relay_that_does_not_say_kinds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with scripted_relay({}) as (url, received):  # an older relay: an empty Welcome
        argv = ["subscribe", "--relay", url, "--view", "sphere:0,0,5", "--count", "1"]
        assert await asyncio.to_thread(main, argv) == 0  # agents: built in, region views
        assert isinstance(received[-1], Subscribe)
        argv = ["subscribe", "--relay", url, "--dataset", "readings", "--view", "a/b"]
        assert await asyncio.to_thread(main, argv) == USAGE
    assert "does not say which views dataset 'readings' takes; give --kind" in (
        capsys.readouterr().err
    )


#: Run ``fanout`` with every package of the relay's extra failing to import.
WITHOUT_RELAY_EXTRA = """
import importlib.abc, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in ("duckdb", "pyarrow", "prometheus_client"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
from fanout.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_command_whose_extra_is_not_installed_says_which_to_install() -> None:
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_RELAY_EXTRA, "relay", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == FAILURE
    assert "Traceback" not in result.stderr
    assert "fanout relay: needs " in result.stderr
    assert "pip install 'fanout-live[relay]'" in result.stderr


def test_the_publishers_catalog_without_the_relay_extra_says_which_to_install() -> None:
    # Nothing listens on port 1: the missing package is said before connecting.
    argv = ["datasets", "--publisher", "ws://127.0.0.1:1"]
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_RELAY_EXTRA, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == FAILURE
    assert result.stderr.startswith("fanout datasets: needs prometheus_client")
    assert "pip install 'fanout-live[relay]'" in result.stderr


def test_mount_refuses_a_mount_point_that_is_not_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere"
    assert main(["mount", "--relay", "ws://127.0.0.1:1", "pps", str(missing)]) == USAGE
    assert "is not a directory" in capsys.readouterr().err


def test_json_spells_timestamps_dates_and_decimals_as_text() -> None:
    import datetime
    from decimal import Decimal

    from fanout.cli.subscribe import finite

    instant = datetime.datetime(2024, 3, 1, 10, 0, 0, 5, tzinfo=datetime.UTC)
    assert finite(instant) == "2024-03-01T10:00:00.000005+00:00"
    assert finite(datetime.date(2024, 2, 29)) == "2024-02-29"
    assert finite(Decimal("99999999.99")) == "99999999.99"
    assert finite(None) is None and finite(float("nan")) is None
    assert finite(b"\x00\xff") == "AP8="  # bytes as base64


def test_a_relay_takes_another_relay_as_upstream_or_the_publisher_not_both(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = _parser().parse_args(["relay", "--upstream", "ws://mid:7710"])
    assert args.upstream == "ws://mid:7710"
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(["relay", "--publisher", "ws://p:7700", "--upstream", "ws://m:7710"])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_relay_of_a_map_plans_with_fit_unless_told_to_widen_otherwise() -> None:
    """No widening flag: the relay's default, ``fit`` in a map and ``tiles`` alone
    (``RelayConfig.policy``); flags change that default, ``--widen`` replaces it."""
    from fanout.cli.relay import policy_given
    from fanout.relay.config import Cluster, Planning, RelayConfig, Upstream
    from fanout.relay.core.planner import IN_A_MAP, Policy

    registry = "redis://10.0.0.9:7000"

    def planned(*flags: str, registry: str | None = registry) -> Policy:
        args = _parser().parse_args(["relay", *flags])
        config = RelayConfig(
            Upstream("ws://p:7700"),
            planning=Planning(policy_given(args, registry)),
            cluster=Cluster(registry),
        )
        return config.policy

    assert planned() == IN_A_MAP == Policy(widen="fit", margin=0.075)
    assert planned(registry=None) == Policy()  # alone, as before
    assert planned("--grace", "1") == Policy(widen="fit", margin=0.075, grace=1.0)
    assert planned("--grace", "1", registry=None) == Policy(grace=1.0)
    assert planned("--margin", "0.2") == Policy(widen="fit", margin=0.2)
    assert planned("--widen", "tiles") == Policy()
    assert planned("--widen", "enclose", "--overshoot", "0.75") == Policy(
        widen="enclose", overshoot=0.75
    )
    exact = Planning(Policy(widen="exact"))
    given = RelayConfig(Upstream("ws://p:7700"), planning=exact, cluster=Cluster(registry))
    assert given.policy == Policy(widen="exact")


def test_a_relay_takes_its_registry_from_flags_over_fanout_toml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fanout.cli.relay import cluster_given

    toml = tmp_path / "fanout.toml"
    toml.write_text('[cluster]\nregistry = "redis://10.0.0.9:7000"\nlease = 5\nside = 128.0\n')
    args = _parser().parse_args(["relay", "--config", str(toml), "--registry-lease", "2"])
    assert cluster_given(args) == {
        "registry": "redis://10.0.0.9:7000",
        "lease": 2.0,
        "side": 128.0,
    }
    assert cluster_given(_parser().parse_args(["relay"])) == {}  # alone, as before
    toml.write_text("[cluster]\nlease = -1\n")
    assert main(["relay", "--port", "0", "--config", str(toml)]) == 2
    assert "cluster.lease: must be > 0, not -1" in capsys.readouterr().err
    toml.write_text('[cluster]\nregistri = "redis://x:1"\n')
    assert main(["relay", "--port", "0", "--config", str(toml)]) == 2
    assert "cluster.registri: unknown key" in capsys.readouterr().err
    assert main(["relay", "--port", "0", "--registry", "redis://no-port"]) == 2
    assert "a registry is redis://HOST:PORT" in capsys.readouterr().err


def test_a_relay_takes_its_split_and_merge_thresholds_from_flags_over_fanout_toml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fanout.cli.relay import cluster_given
    from fanout.relay.config import Cluster

    toml = tmp_path / "fanout.toml"
    toml.write_text(
        "[cluster]\nsplit_above = { subscribers = 500, cpu = 0.8 }\n"
        'merge_below = { subscribers = 100 }\nsplit_dwell = 5\nsplit_command = "run {name}"\n'
    )
    args = _parser().parse_args(
        ["relay", "--config", str(toml), "--split-above", "pushes=2000", "--standby"]
    )
    given = cluster_given(args)
    assert given == {
        "split_above": {"pushes": 2000.0},
        "merge_below": {"subscribers": 100.0},
        "split_dwell": 5.0,
        "standby": True,
        "split_command": "run {name}",
    }
    cluster = Cluster("redis://r:1", **given)
    assert cluster.thresholds.on and cluster.thresholds.dwell == 5.0
    bad = ["relay", "--registry", "redis://r:1", "--split-above", "subscribers=5"]
    assert main([*bad, "--merge-below", "subscribers=9"]) == 2
    assert "merge_below subscribers=9 must be less than split_above" in capsys.readouterr().err
    assert main(["relay", "--split-above", "load=5"]) == 2
    assert "unknown figure 'load'" in capsys.readouterr().err
    assert main(["relay", "--split-above", "cpu"]) == 2
    assert "'cpu' is not FIGURE=NUMBER" in capsys.readouterr().err
    assert main(["relay", "--standby"]) == 2
    assert "need a map of responsibility (--registry)" in capsys.readouterr().err
    # A forwarding relay keeps its subscribers after a split: only subscribers measure it.
    forward = [*bad, "--registry-policy", "forward"]
    assert main([*forward, "--merge-below", "rows=9"]) == 2
    assert "forward measure subscribers only (not rows)" in capsys.readouterr().err
    forwarding = Cluster(
        "redis://r:1",
        policy="forward",
        split_above={"subscribers": 5.0},
        merge_below={"subscribers": 2.0},
    )
    assert forwarding.thresholds.on
