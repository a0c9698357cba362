"""The ``fanout`` command: run the parts of a deployment, subscribe, explain coverage, demo.

Exit statuses: 0 success; 1 a failure while running (a relay or publisher unreachable, a
subscription refused, a connection lost, a package of the command's extra not installed); 2 a
usage error: the command line, or the configuration file it names, asks for what cannot be done
(argparse's own errors, a bad flag value, a bad view). Errors are one line on stderr,
``fanout COMMAND: message``, not a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from websockets.exceptions import WebSocketException

from fanout import cli_security
from fanout.demoload import demo_period
from fanout.errors import ConfigError, FanoutError, InvalidView

DEFAULT_PUBLISHER = "ws://127.0.0.1:7700"
DEFAULT_RELAY = "ws://127.0.0.1:7701"
#: Datasets built into the publisher, by the view kind they take.
BUILTIN_KINDS = {"agents": "region"}
#: Exit statuses.
FAILURE, USAGE = 1, 2
#: The extra each command needs beyond the base install (docs/deploy.md).
EXTRAS = {"relay": "relay", "publisher": "publisher", "demo": "demo", "mount": "mount"}
#: The modules those extras install: one missing is a missing extra, not a bug.
EXTRA_MODULES = frozenset(
    {"duckdb", "pyarrow", "prometheus_client", "pyspark", "py4j", "pandas", "psycopg", "rich"}
    | {"mfusepy"}
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0, ``FAILURE`` or ``USAGE``)."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        status: int = args.run(args)
    except KeyboardInterrupt:
        return 130
    except (ConfigError, InvalidView) as exc:  # what the command line asks for cannot be done
        print(f"fanout {args.command}: {exc}", file=sys.stderr)
        return USAGE
    except (FanoutError, OSError, WebSocketException) as exc:  # what failed while running
        print(f"fanout {args.command}: {exc}", file=sys.stderr)
        return FAILURE
    except ModuleNotFoundError as exc:
        module = (exc.name or "").partition(".")[0]
        if module not in EXTRA_MODULES or args.command not in EXTRAS:
            raise
        extra = EXTRAS[args.command]
        print(
            f"fanout {args.command}: needs {module}, which is not installed here:"
            f" pip install 'fanout[{extra}]' (docs/deploy.md)",
            file=sys.stderr,
        )
        return FAILURE
    return status


def _version() -> str:
    """fanout's version, as installed."""
    try:
        return metadata.version("fanout")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed: no version)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fanout",
        description=(
            "Live, personalised views of a large, volatile dataset, delivered to very many"
            " subscribers: a Spark publisher holds the data, relays near the subscribers share it"
            " and push each subscriber its own view."
        ),
        epilog="Run 'fanout COMMAND --help' for a command's options. Docs: docs/cli.md.",
    )
    parser.add_argument("--version", action="version", version=f"fanout {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _demo_parser(commands)
    _publisher_parser(commands)
    _relay_parser(commands)
    _subscribe_parser(commands)
    _explain_parser(commands)
    cli_security.token_parser(commands, _command)
    _mount_parser(commands)
    return parser


def _command(commands: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """Add a subcommand; every subcommand takes ``--log-level``."""
    parser: argparse.ArgumentParser = commands.add_parser(name, **kwargs)
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="what to log on stderr (default: warning)",
    )
    return parser


def _add_simulation(
    parser: argparse.ArgumentParser, agents: int = 10_000, max_ticks_per_batch: int = 600
) -> None:
    group = parser.add_argument_group("simulation (the built-in 'agents' dataset)")
    group.add_argument(
        "--agents", type=int, default=agents, help=f"number of agents (default: {agents})"
    )
    group.add_argument(
        "--dims", type=int, default=2, choices=[2, 3], help="2-D or 3-D world (default: 2)"
    )
    group.add_argument(
        "--tick-rate", type=float, default=10.0, help="ticks per second (default: 10)"
    )
    group.add_argument(
        "--world", type=float, default=1000.0, help="side of the world (default: 1000)"
    )
    group.add_argument(
        "--speed", type=float, default=20.0, help="mean agent speed, units/s (default: 20)"
    )
    group.add_argument("--seed", type=int, default=0, help="simulation seed (default: 0)")
    group.add_argument(
        "--period",
        type=int,
        default=1,
        help="each agent moves every PERIOD ticks (default: 1, every agent every tick)",
    )
    group.add_argument(
        "--max-ticks-per-batch",
        type=int,
        default=max_ticks_per_batch,
        help=(
            "admission control: ticks one micro-batch takes at most (each agent's last move in"
            f" them; default: {max_ticks_per_batch})"
        ),
    )


def _simulation(args: argparse.Namespace, max_ticks: int = 0) -> Any:
    from fanout.publisher.sources.simulation import SimulationParams

    return SimulationParams(
        agents=args.agents,
        dims=args.dims,
        rate=args.tick_rate,
        world=args.world,
        speed=args.speed,
        seed=args.seed,
        period=args.period,
        max_ticks=max_ticks,
        max_ticks_per_batch=args.max_ticks_per_batch,
    )


# -- demo ------------------------------------------------------------------------------------


def _demo_parser(commands: Any) -> None:
    parser = _command(
        commands,
        "demo",
        help="run a publisher, a relay and simulated subscribers with a live status view",
        description=(
            "Start the publisher (Spark local[*], the simulated 'agents' dataset), one relay and"
            " simulated subscribers, each holding a box view that follows a moving point; show a"
            " live status table until Ctrl-C. With --duration, run that long, then check every"
            " subscriber's last view against the publisher's state at that tick and exit 0 only"
            " if all match."
        ),
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=0.0,
        help="seconds to run, then check (default: until Ctrl-C)",
    )
    parser.add_argument(
        "--subscribers", type=int, default=50, help="simulated subscribers (default: 50)"
    )
    parser.add_argument(
        "--box", type=float, default=100.0, help="side of each subscriber's box (default: 100)"
    )
    parser.add_argument(
        "--rate", type=float, default=10.0, help="pushes per second per subscriber (default: 10)"
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="publisher state (default: a fresh temporary directory)",
    )
    parser.add_argument(
        "--plain", action="store_true", help="print status lines instead of a live table"
    )
    # The demo's micro-batches hold each agent's last move, so one spanning many ticks is no
    # bigger: after Spark's slow first micro-batch the demo catches up with the clock at once.
    _add_simulation(parser, max_ticks_per_batch=600)
    # A load this machine keeps near Spark's floor (fanout.demoload); --period overrides it.
    parser.set_defaults(run=_run_demo, period=demo_period(10_000, 10.0))


def _run_demo(args: argparse.Namespace) -> int:
    from fanout.demo import DemoConfig, run_demo

    config = DemoConfig(
        duration=args.duration,
        subscribers=args.subscribers,
        box=args.box,
        rate=args.rate,
        simulation=_simulation(args),
        state_dir=args.state_dir,
        plain=args.plain,
        log_level=args.log_level,
    )
    return run_demo(config)


# -- publisher -------------------------------------------------------------------------------


def _publisher_parser(commands: Any) -> None:
    parser = _command(
        commands,
        "publisher",
        help="run the Spark publisher and its control plane",
        description=(
            "Run the publisher: a Spark Structured Streaming pipeline holding the authoritative"
            " data, and the WebSocket control plane where relays acquire primitives and receive"
            " one batch per micro-batch. Prints 'fanout publisher ready ws://HOST:PORT' once"
            " relays can connect. Restarting with the same --state-dir continues the same stream."
        ),
    )
    parser.add_argument(
        "--host", default=None, help="interface for the control plane (default: 127.0.0.1)"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help="control-plane port; 0 picks a free one (default: 7700)",
    )
    parser.add_argument(
        "--master",
        default=None,
        help="Spark master URL, e.g. spark://HOST:7077 (default: local[*])",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="checkpoint and stream identity (default: var/publisher)",
    )
    parser.add_argument(
        "--trigger",
        type=float,
        default=None,
        help="seconds between micro-batches (default: 0, as fast as possible)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="fanout.toml declaring the datasets and publisher settings (docs/configuration.md);"
        " flags given on the command line override the file. Without it the publisher serves"
        " the built-in 'agents' simulation shaped by the simulation options below",
    )
    parser.add_argument(
        "--log",
        default=None,
        help="URL of the log of delivered batches, e.g. sqlite:///var/publisher/log.db",
    )
    parser.add_argument(
        "--max-ticks",
        type=int,
        default=0,
        help="stop the simulation after this tick (default: never)",
    )
    _add_simulation(parser)
    cli_security.add_server(parser)
    parser.set_defaults(run=_run_publisher)


def _run_publisher(args: argparse.Namespace) -> int:
    from fanout.publisher.app import run
    from fanout.publisher.config import PublisherSettings, load_config
    from fanout.publisher.datasets import agents

    if args.config is not None:
        settings = load_config(args.config)
    else:
        built_in = agents(_simulation(args, args.max_ticks))
        settings = PublisherSettings(datasets={built_in.name: built_in})
    settings = settings.override(
        host=args.host,
        port=args.port,
        master=args.master,
        state_dir=args.state_dir,
        trigger=args.trigger,
        log=args.log,
        auth=cli_security.auth_config(args),
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
    )
    return run(settings)


# -- relay -----------------------------------------------------------------------------------


def _relay_parser(commands: Any) -> None:
    parser = _command(
        commands,
        "relay",
        help="run a relay between the publisher and subscribers",
        description=(
            "Run a relay: it keeps a copy of the union of its subscribers' views, subscribes"
            " upstream only for what it does not already cover, and pushes every subscriber its"
            " own view at its own rate. Prints 'fanout relay ready ws://HOST:PORT' once"
            " connected to the publisher and listening."
        ),
    )
    above = parser.add_mutually_exclusive_group()
    above.add_argument(
        "--publisher",
        default=DEFAULT_PUBLISHER,
        help=f"publisher control plane (default: {DEFAULT_PUBLISHER})",
    )
    above.add_argument(
        "--upstream",
        metavar="URL",
        help="another relay to take the data from instead of the publisher (a tier:"
        " docs/cluster.md); that relay's port, ws://HOST:PORT",
    )
    parser.add_argument(
        "--serve-relays",
        action="store_true",
        help="also serve relays started with --upstream pointed at this one (a tier:"
        " docs/cluster.md); off by default, so that an exposed relay serves subscribers only",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="interface for subscribers (default: 127.0.0.1)"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=7701,
        help="port for subscribers; 0 picks a free one (default: 7701)",
    )
    parser.add_argument(
        "--name", default="relay", help="name shown to the publisher (default: relay)"
    )
    parser.add_argument(
        "--widen",
        choices=["tiles", "margin", "exact", "enclose"],
        default="tiles",
        help="what to acquire upstream for a view not covered: shared grid tiles, the view plus"
        " a margin, exactly the uncovered part, or one box enclosing the view and the held"
        " primitives it meets (default: tiles)",
    )
    parser.add_argument(
        "--margin",
        type=float,
        default=0.5,
        help="grow views by this fraction of their size before widening (default: 0.5)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=10.0,
        help="seconds before an unneeded primitive is released (default: 10)",
    )
    parser.add_argument(
        "--lead",
        type=float,
        default=0.0,
        help="acquire this many seconds of a moving view's motion ahead of it (default: 0, off)",
    )
    parser.add_argument(
        "--overshoot",
        type=float,
        default=0.0,
        help="with --widen enclose: a side of the enclosure that must grow by d grows by"
        " (1 + this) * d (default: 0)",
    )
    limits = parser.add_argument_group(
        "limits", "what subscriber connections may take of the relay (docs/configuration.md)"
    )
    for flag, kind, default, what in RELAY_LIMITS:
        limits.add_argument(flag, type=kind, help=f"{what} (default: {default})")
    cli_security.add_server(parser)
    cli_security.add_client(parser)
    mqtt = parser.add_argument_group("MQTT", "stock MQTT 3.1.1 and 5.0 clients (docs/mqtt.md)")
    mqtt.add_argument(
        "--mqtt-port",
        type=int,
        help="serve MQTT clients on this port (1883 is MQTT's; default: off)",
    )
    mqtt.add_argument(
        "--mqtt-dataset",
        help="the topic dataset retained MQTT messages are kept in (an ingest dataset with a"
        " 'payload' string column; default: none)",
    )
    mqtt.add_argument(
        "--mqtt-route",
        action="append",
        default=[],
        metavar="PREFIX=DATASET",
        help="topics starting with PREFIX are kept in DATASET (repeatable; longest prefix wins)",
    )
    mqtt.add_argument(
        "--mqtt-redis",
        metavar="HOST:PORT",
        help="a node of the Redis Cluster holding the shared match table: relays given the same"
        " cluster are one MQTT broker (default: none, this relay alone)",
    )
    mqtt.add_argument(
        "--mqtt-peer-port",
        type=int,
        default=0,
        help="port other relays forward MQTT messages to (default: 0, a free one)",
    )
    mqtt.add_argument(
        "--mqtt-lease",
        type=float,
        default=3.0,
        help="seconds a relay that died stays a subscriber in the shared table (default: 3)",
    )
    for flag, kind, default, what in MQTT_LIMITS:
        mqtt.add_argument(flag, type=kind, help=f"{what} (default: {default})")
    _cluster_arguments(parser)
    parser.set_defaults(run=_run_relay)


def _cluster_arguments(parser: argparse.ArgumentParser) -> None:
    cluster = parser.add_argument_group(
        "cluster", "relays sharing a map of responsibility (docs/cluster.md)"
    )
    cluster.add_argument(
        "--registry",
        metavar="redis://HOST:PORT",
        help="a node of the Redis Cluster holding the map of responsibility: the relay joins"
        " it under --name (unique per cluster) and redirects new subscriptions another relay"
        " is responsible for (default: none, this relay alone)",
    )
    cluster.add_argument(
        "--registry-policy",
        choices=("redirect", "forward"),
        help="a subscription another relay of the map is responsible for: redirect it there"
        " (a new one), or forward: serve it here with that relay's rows from that relay"
        " (default: redirect)",
    )
    cluster.add_argument(
        "--registry-lease",
        type=float,
        help="seconds a relay that died stays in the map (default: 3)",
    )
    cluster.add_argument(
        "--registry-side",
        type=float,
        help="side of the grid cells space datasets are split into, the same on every relay"
        " (default: 256)",
    )
    cluster.add_argument(
        "--advertise",
        metavar="URL",
        help="the URL subscribers are redirected to for this relay (default: ws://HOST:PORT"
        " as it listens)",
    )
    cluster.add_argument(
        "--config",
        type=Path,
        help="fanout.toml whose [cluster] table gives the four settings above (flags given"
        " override it; docs/configuration.md)",
    )


#: The MQTT listener's limits as flags, like ``RELAY_LIMITS``: ``relay.mqtt.actions.Limits``.
MQTT_LIMITS: list[tuple[str, type, float, str]] = [
    ("--mqtt-max-packet", int, 1 << 20, "largest MQTT packet accepted, in bytes"),
    ("--mqtt-max-queued", int, 1000, "QoS 1 messages kept per session while its client is away"),
    ("--mqtt-session-expiry", float, 3600.0, "longest a persistent session outlives its client"),
    ("--mqtt-max-subscriptions", int, 10_000, "topic filters one MQTT session may hold"),
    ("--mqtt-receive-maximum", int, 100, "QoS 1 and 2 messages in flight to one MQTT client"),
]


#: The relay's limits as flags: (flag, type, default, help). The defaults are ``RelayConfig``'s
#: (a test holds them equal); a flag not given leaves the field at its default.
RELAY_LIMITS: list[tuple[str, type, float, str]] = [
    ("--queue-limit", int, 64, "frames queued for a subscriber before it is closed as slow"),
    (
        "--stall-timeout",
        float,
        10.0,
        "seconds a push may go unread before its subscriber is closed as slow",
    ),
    ("--read-rate", float, 1000.0, "frames a second read from a connection; 0: no limit"),
    ("--read-burst", int, 1000, "frames read at once before --read-rate applies"),
    ("--query-timeout", float, 0.5, "seconds a subscriber's SQL may run before it is stopped"),
    ("--max-subscriptions", int, 10_000, "subscriptions one connection may hold"),
    ("--max-connections", int, 10_000, "subscriber connections served at once (ulimit -n!)"),
    ("--hello-timeout", float, 10.0, "seconds a new connection may take to say Hello"),
    (
        "--catalog-wait",
        float,
        30.0,
        "seconds a subscription waits for the catalog while the relay has no publisher",
    ),
    ("--max-held", int, 10_000, "subscriptions held waiting for the catalog, in all"),
    (
        "--control-share",
        float,
        0.5,
        "seconds of the event loop subscribers' frames may take a second, all connections",
    ),
    ("--control-burst", float, 0.5, "seconds they may take at first"),
    ("--sql-share", float, 0.25, "seconds of the event loop a connection's SQL may take a second"),
    ("--sql-burst", float, 1.0, "seconds its SQL may take at first, before --sql-share applies"),
]


def _cluster_given(args: argparse.Namespace) -> dict[str, Any]:
    """``RelayConfig``'s registry fields from the flags, else ``--config``'s ``[cluster]``;
    those neither gives keep their defaults."""
    from fanout.relay.cluster.settings import ClusterSettings, load_cluster

    file = ClusterSettings() if args.config is None else load_cluster(args.config)
    given = {
        "registry": (args.registry, file.registry),
        "registry_policy": (args.registry_policy, file.policy),
        "registry_lease": (args.registry_lease, file.lease),
        "registry_side": (args.registry_side, file.side),
        "advertise": (args.advertise, file.advertise),
    }
    return {
        field: flag if flag is not None else setting
        for field, (flag, setting) in given.items()
        if flag is not None or setting is not None
    }


def _run_relay(args: argparse.Namespace) -> int:
    from fanout.relay.config import RelayConfig
    from fanout.relay.mqtt.actions import Limits as MqttLimits
    from fanout.relay.mqtt.ingest import parse_route
    from fanout.relay.planner import Policy
    from fanout.relay.server import RelayServer

    config = RelayConfig(
        publisher=args.upstream or args.publisher,
        host=args.host,
        port=args.port,
        name=args.name,
        serve_relays=args.serve_relays,
        policy=Policy(
            widen=args.widen,
            margin=args.margin,
            grace=args.grace,
            lead=args.lead,
            overshoot=args.overshoot,
        ),
        auth=cli_security.auth_config(args),
        token=cli_security.token(args),
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_ca=args.tls_ca,
        mqtt_port=args.mqtt_port,
        mqtt_dataset=args.mqtt_dataset,
        mqtt_routes=tuple(parse_route(route) for route in args.mqtt_route),
        mqtt_redis=args.mqtt_redis,
        mqtt_peer_port=args.mqtt_peer_port,
        mqtt_lease=args.mqtt_lease,
        **_cluster_given(args),
        mqtt=MqttLimits(**_given(args, MQTT_LIMITS, "--mqtt-")),
        **_limits_given(args),
    )
    server = RelayServer(config)
    scheme = "ws" if config.tls_cert is None else "wss"

    def ready(port: int) -> None:
        print(f"fanout relay ready {scheme}://{config.host}:{port}", flush=True)

    asyncio.run(server.run(ready))
    return 0


def _limits_given(args: argparse.Namespace) -> dict[str, Any]:
    """The ``RELAY_LIMITS`` flags given, as ``RelayConfig`` fields."""
    return _given(args, RELAY_LIMITS)


def _given(
    args: argparse.Namespace, flags: list[tuple[str, type, float, str]], prefix: str = "--"
) -> dict[str, Any]:
    """The ``flags`` given, as fields (the flag without ``prefix``, ``-`` as ``_``)."""
    names = {
        flag[2:].replace("-", "_"): flag[len(prefix) :].replace("-", "_") for flag, *_ in flags
    }
    return {
        field: getattr(args, name)
        for name, field in names.items()
        if getattr(args, name) is not None
    }


# -- subscribe -------------------------------------------------------------------------------


def _subscribe_parser(commands: Any) -> None:
    parser = _command(
        commands,
        "subscribe",
        help="subscribe to a view on a relay and print its updates",
        description=(
            "Subscribe to a view and print one line per update: a summary, or with --json one"
            " JSON object per line (tick, seq, full, entered, updated, left)."
        ),
    )
    parser.add_argument(
        "--relay",
        default=DEFAULT_RELAY,
        help=(
            f"relay URL (default: {DEFAULT_RELAY}); several, comma-separated, to move to the next"
            " when a connection is lost (in mode every, resuming with no gap)"
        ),
    )
    parser.add_argument(
        "--route",
        choices=("order", "area", "key"),
        default="order",
        help=(
            "order: try the --relay URLs as given; area: rank them by the view's area, so"
            " subscribers of one area meet at one relay and share its data; key: rank them by"
            " --key, so subscribers giving the same key meet (default: order)"
        ),
    )
    parser.add_argument(
        "--key", help="routing key for --route key (e.g. the point of interest watched)"
    )
    parser.add_argument(
        "--area",
        type=float,
        default=256.0,
        help="side of the routing grid for --route area, in world units (default: 256)",
    )
    parser.add_argument("--dataset", default="agents", help="dataset (default: agents)")
    parser.add_argument(
        "--mode",
        choices=("latest", "every"),
        default="latest",
        help=(
            "latest: the view at one tick per update, ticks may be coalesced; every: every seq,"
            " in order, exactly once (default: latest)"
        ),
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--box", help="a box view: x0,y0,x1,y1 (or x0,y0,z0,x1,y1,z1 in 3-D)")
    what.add_argument(
        "--view",
        help=(
            "any view in text syntax, e.g. 'sphere:500,500,50', or 'rel:42:sphere:0,0,50' to"
            " follow entity 42; with --kind, a SELECT, a topic filter or an object path"
            " (docs/concepts.md)"
        ),
    )
    parser.add_argument(
        "--kind",
        choices=["region", "sql", "topic", "path"],
        default=None,
        help=(
            "the language of --view, the dataset's: region, sql (a SELECT), topic (an MQTT"
            " filter) or path (an object path) (default: the dataset's, as the relay says)"
        ),
    )
    parser.add_argument(
        "--rate", type=float, default=10.0, help="pushes per second at most (default: 10)"
    )
    parser.add_argument(
        "--count", type=int, default=0, help="stop after this many updates (default: never)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per update")
    cli_security.add_client(parser)
    parser.set_defaults(run=_run_subscribe)


def _run_subscribe(args: argparse.Namespace) -> int:
    from fanout.cli_subscribe import run

    return asyncio.run(run(args))


# -- explain ---------------------------------------------------------------------------------


def _explain_parser(commands: Any) -> None:
    parser = _command(
        commands,
        "explain",
        help="show whether held views cover a view, and what is missing",
        description=(
            "An EXPLAIN for subscriptions: the relay's coverage step made visible. Prints whether"
            " the views in --have together cover --view and, if not, the residual primitives a"
            " relay would subscribe upstream for."
        ),
    )
    parser.add_argument(
        "--dataset", default="agents", help="dataset the views are of (default: agents)"
    )
    parser.add_argument(
        "--kind",
        choices=["region", "sql", "topic", "path"],
        default=None,
        help="view language (default: from the dataset; needed for datasets not built in)",
    )
    parser.add_argument("--view", required=True, help="the view to explain, in text syntax")
    parser.add_argument(
        "--have",
        action="append",
        default=[],
        metavar="VIEW",
        help="a view already held (repeatable)",
    )
    parser.add_argument(
        "--rule",
        action="append",
        default=[],
        metavar="DATASET=VIEW",
        help="an access rule, as a token's rules claim holds them (repeatable): explain the"
        " effective view, --view intersected with the rules (docs/security.md#access-rules)",
    )
    parser.set_defaults(run=_run_explain)


def _run_explain(args: argparse.Namespace) -> int:
    from fanout.views.explain import explain

    kind = args.kind or BUILTIN_KINDS.get(args.dataset)
    if kind is None:
        raise ConfigError(
            f"dataset {args.dataset!r} is not built in; say its view language with --kind"
        )
    view = args.view
    if args.rule:
        from fanout.relay.rules import effective
        from fanout.views.text import parse, to_text

        rules = cli_security.rules_of(args.rule)
        try:
            view = effective(parse(view, kind), args.dataset, kind, rules)
        except FanoutError as exc:  # Unauthorized: what a relay would refuse, and why
            print(f"EFFECTIVE VIEW: refused ({getattr(exc, 'code', 'error')}): {exc}")
            return FAILURE
        print(f"EFFECTIVE VIEW under {len(args.rule)} rule(s): {to_text(view)}")
    print(explain(kind, view, args.have).render())
    return 0


# -- mount -----------------------------------------------------------------------------------


def _mount_parser(commands: Any) -> None:
    parser = _command(
        commands,
        "mount",
        help="mount an objects dataset as files: ls, cat and echo subscribe and publish",
        description=(
            "Mount an objects dataset (QNX-PPS-style objects) at MOUNTPOINT with FUSE: directories"
            " are directories, objects are files. 'cat obj' prints an object, 'cat 'obj?delta,"
            "wait'' follows its changes, 'echo attr::value >> obj' publishes (durable when it"
            " returns), 'rm obj' deletes it. Runs in the foreground; Ctrl-C or SIGTERM unmounts"
            " (docs/objects.md)."
        ),
    )
    parser.add_argument(
        "--relay",
        default=DEFAULT_RELAY,
        help=f"the relay reads come from (default: {DEFAULT_RELAY})",
    )
    parser.add_argument(
        "--publisher",
        default=None,
        help="send writes to this publisher (default: through the relay, which forwards them)",
    )
    parser.add_argument("dataset", metavar="DATASET", help="an objects dataset")
    parser.add_argument("mountpoint", metavar="MOUNTPOINT", help="an empty directory")
    parser.set_defaults(run=_run_mount)


def _run_mount(args: argparse.Namespace) -> int:
    from fanout.mount import mount

    if not os.path.isdir(args.mountpoint):
        raise ConfigError(f"mount point {args.mountpoint!r} is not a directory")
    return mount(args.relay, args.publisher, args.dataset, args.mountpoint)
