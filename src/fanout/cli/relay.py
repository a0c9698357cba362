"""``fanout relay``: its flags and how they become a ``RelayConfig`` (``fanout.cli.main`` has the
command line's other parts)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fanout.cli import security as cli_security
from fanout.cli import settings
from fanout.cli.relaymqtt import mqtt_arguments, mqtt_config
from fanout.cli.settings import fields_given
from fanout.errors import ConfigError

if TYPE_CHECKING:
    from fanout.relay.config import RelayConfig
    from fanout.relay.core.planner import Policy
    from fanout.relay.shell.server import RelayServer

log = logging.getLogger(__name__)

#: ``fanout.cli.main``'s maker of a subcommand's parser (every subcommand takes ``--log-level``).
Command = Callable[..., argparse.ArgumentParser]
DEFAULT_PUBLISHER = "ws://127.0.0.1:7700"


def relay_parser(commands: Any, command: Command) -> None:
    """Add ``fanout relay`` to ``commands`` (``command``: ``fanout.cli.main``'s subcommand
    maker)."""
    parser = command(
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
        "--upstream-keepalive",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="ping the upstream this often and give the link up when a pong is this late: a"
        " silent link (a partition) is left within twice this, then resumed (default: 20)",
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
        choices=["tiles", "margin", "exact", "enclose", "fit"],
        help="what to acquire upstream for a view not covered: shared grid tiles, the view plus"
        " a margin, exactly the uncovered part, one box enclosing the view and the held"
        " primitives it meets, or one box fitted to the cluster of views it joins (default:"
        " tiles; fit with --registry: docs/cluster.md)",
    )
    parser.add_argument(
        "--margin",
        type=float,
        help="grow views by this fraction of their size before widening; with fit, the most a"
        " side is stretched (default: 0.5; 0.075 with --registry and no --widen)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        help="seconds before an unneeded primitive is released (default: 10)",
    )
    parser.add_argument(
        "--lead",
        type=float,
        help="acquire this many seconds of a moving view's motion ahead of it (default: 0, off)",
    )
    parser.add_argument(
        "--overshoot",
        type=float,
        help="with --widen enclose: a side of the enclosure that must grow by d grows by"
        " (1 + this) * d (default: 0)",
    )
    parser.add_argument(
        "--loop",
        choices=("uvloop", "asyncio"),  # relay.config.EventLoop (not imported: --help stays fast)
        default="asyncio",
        help="the event loop the relay runs on: asyncio's own, or uvloop (compiled; measured in"
        " docs/benchmarks/relay.md: no gain a push) (default: asyncio)",
    )
    parser.add_argument(
        "--workers",
        type=workers_count,
        help="processes serving --port: N > 1 makes this one their leader, holding the link"
        " upstream and its state in shared memory, and N workers, edge relays of it sharing the"
        " port (SO_REUSEPORT); 'auto': as many as the cores this process may run on; MQTT"
        " sessions stay on the leader (docs/deploy.md) (default: auto)",
    )
    parser.add_argument(
        "--workers-port",
        type=int,
        default=0,
        help="with --workers N > 1, the leader's own port on 127.0.0.1, where workers connect"
        " and whose /metrics sums theirs; 0 picks a free one, logged (default: 0)",
    )
    parser.add_argument(
        "--no-shared-state",
        dest="shared_state",
        action="store_false",
        help="with --workers N > 1, send the workers the leader's rows over their links instead"
        " of its state in shared memory, written once a swap (docs/deploy.md)",
    )
    parser.add_argument(
        "--mmap-threshold",
        type=int,
        help="glibc's mmap threshold in bytes, fixed while the relay runs; 0 leaves glibc's"
        " dynamic one (docs/operations.md) (default: 0)",
    )
    parser.add_argument(
        "--trim-every",
        type=float,
        help="seconds between two malloc_trim(0), giving glibc's free pages back; 0: never"
        " (docs/operations.md) (default: 10)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # the leader's
    limits = parser.add_argument_group(
        "limits", "what subscriber connections may take of the relay (docs/configuration.md)"
    )
    for flag, kind, default, what in RELAY_LIMITS:
        limits.add_argument(flag, type=kind, help=f"{what} (default: {default})")
    cli_security.add_client(parser, group=cli_security.add_server(parser))
    mqtt_arguments(parser)
    _cluster_arguments(parser)
    settings.record_given(parser)
    parser.set_defaults(run=run_relay, parser=parser)


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
        "--split-above",
        action="append",
        metavar="FIGURE=VALUE",
        help="hand about half of this relay's parts to another relay when a figure stays past"
        " VALUE for --split-dwell: subscribers, pushes (a second), cpu (share of a core), rows"
        " (subscribers only with --registry-policy forward); repeat for several (default:"
        " never)",
    )
    cluster.add_argument(
        "--merge-below",
        action="append",
        metavar="FIGURE=VALUE",
        help="hand back the parts this relay received when every figure named stays below its"
        " VALUE for --split-dwell (default: never)",
    )
    cluster.add_argument(
        "--split-dwell",
        type=float,
        help="seconds a split or merge condition must hold, and between two moves (default: 10)",
    )
    cluster.add_argument(
        "--standby",
        action="store_true",
        default=None,
        help="join the map owning nothing: parts come here only when a relay splits",
    )
    cluster.add_argument(
        "--split-command",
        metavar="CMD",
        help="shell command starting a --standby relay to split to when none is idle; {name}"
        " in it becomes a fresh relay name (default: split only to idle standbys)",
    )
    cluster.add_argument(
        "--split-wait",
        type=float,
        help="seconds to wait for the relay --split-command started to join (default: 30)",
    )
    cluster.add_argument(
        "--config",
        type=Path,
        help="fanout.toml whose [relay] table gives any of these flags' settings, by name"
        " (mqtt_port = 1883), and [cluster] the cluster's; $FANOUT_RELAY_* variables"
        " override the file, flags given override both (docs/configuration.md)",
    )


#: The relay's limits as flags: (flag, type, default, help). The defaults are ``Limits``'s
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
    (
        "--query-timeout",
        float,
        0.5,
        "seconds a subscriber's SQL, or a transducer's evaluation, may run before it is stopped",
    ),
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


def cluster_given(args: argparse.Namespace) -> dict[str, Any]:
    """``relay.config.Cluster``'s fields from the flags, else ``--config``'s ``[cluster]``;
    those neither gives keep their defaults."""
    from fanout.cluster.settings import ClusterSettings, load_cluster, parse_figures

    file = ClusterSettings() if args.config is None else load_cluster(args.config)
    given = {
        "registry": (args.registry, file.registry),
        "policy": (args.registry_policy, file.policy),
        "lease": (args.registry_lease, file.lease),
        "side": (args.registry_side, file.side),
        "advertise": (args.advertise, file.advertise),
        "split_above": (parse_figures(args.split_above, "--split-above"), file.split_above),
        "merge_below": (parse_figures(args.merge_below, "--merge-below"), file.merge_below),
        "split_dwell": (args.split_dwell, file.split_dwell),
        "standby": (args.standby, file.standby),
        "split_command": (args.split_command, file.split_command),
        "split_wait": (args.split_wait, file.split_wait),
    }
    return {
        field: flag if flag is not None else setting
        for field, (flag, setting) in given.items()
        if flag is not None or setting is not None
    }


def run_relay(args: argparse.Namespace) -> int:
    """Run ``fanout relay`` with the parsed ``args`` (its settings not given as flags taken
    from the environment and ``--config``'s ``[relay]``: ``cli.settings``)."""
    from fanout.relay.config import (
        Cluster,
        Limits,
        Listening,
        Planning,
        Process,
        RelayConfig,
        Upstream,
    )
    from fanout.relay.shell import loops
    from fanout.relay.shell.server import RelayServer

    if args.worker:  # started by a leader (``--workers``), its configuration on stdin
        from fanout.relay.shell import worker

        return worker.run(sys.stdin.buffer.read())
    args = settings.resolve(args.parser, args, "relay", args.config, os.environ)
    if args.worker:  # from a file or the environment: a leader starts its workers itself
        raise ConfigError("worker is no setting: a relay started with --workers N starts them")

    cluster = Cluster(**cluster_given(args))
    config = RelayConfig(
        Upstream(
            args.upstream or args.publisher,
            token=cli_security.token(args),
            token_file=args.token_file,
            tls_ca=args.tls_ca,
            keepalive=args.upstream_keepalive,
        ),
        name=args.name,
        listening=Listening(
            args.host,
            args.port,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            serve_relays=args.serve_relays,
        ),
        limits=Limits(**_limits_given(args)),
        planning=Planning(policy_given(args, cluster.registry)),
        auth=cli_security.auth_config(args),
        cluster=cluster,
        mqtt=mqtt_config(args),
        process=Process(
            loop=args.loop,
            workers=default_workers() if args.workers is None else args.workers,
            workers_port=args.workers_port,
            shared_state=args.shared_state,
            **_allocator_given(args),
        ),
    )
    server = RelayServer(config) if config.process.workers == 1 else _leader(config, args)
    where = config.listening

    def ready(port: int) -> None:
        print(f"fanout relay ready {where.scheme}://{where.host}:{port}", flush=True)

    loops.run(_until_stopped(server, ready), config.process.loop)
    return 0


def default_workers() -> int:
    """``--workers`` not given: ``auto``."""
    return workers_count("auto")


def workers_count(value: str) -> int:
    """``--workers``: a number, or ``auto``: the cores this process may run on (its CPU
    affinity, as a container or ``taskset`` limits it; else the machine's)."""
    if value != "auto":
        return int(value)
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _allocator_given(args: argparse.Namespace) -> dict[str, Any]:
    """``Process``'s allocator settings among ``args``, those given (the rest its defaults)."""
    given = {"mmap_threshold": args.mmap_threshold, "trim_every": args.trim_every}
    return {name: value for name, value in given.items() if value is not None}


async def _until_stopped(server: RelayServer, ready: Callable[[int], None]) -> None:
    """Run ``server`` until SIGTERM (a supervisor stopping it) or SIGINT: either stops it as
    cleanly, leaving the map of responsibility at once and closing its connections, rather
    than dying with its lease still in the map."""
    running = asyncio.current_task()
    assert running is not None
    stopped: list[int] = []

    def stop(number: int) -> None:
        stopped.append(number)
        running.cancel()

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop, signal.SIGTERM)
    try:
        await server.run(ready)
    except asyncio.CancelledError:
        if not stopped:
            raise
        log.info("relay: stopped by signal %d", stopped[0])


def _leader(config: RelayConfig, args: argparse.Namespace) -> RelayServer:
    """The leader of ``config.process.workers`` workers, each started as ``fanout relay
    --worker`` logging as this process does (``relay.shell.workers``)."""
    from fanout.relay.shell.workers import Leader

    return Leader(config, worker_command(args.log_level, args.log_format))


def worker_command(level: str, form: str) -> list[str]:
    """The command a leader starts each worker with (its configuration goes on stdin)."""
    command = [sys.executable, "-m", "fanout", "relay", "--worker"]
    return [*command, "--log-level", level, "--log-format", form]


def policy_given(args: argparse.Namespace, registry: str | None) -> Policy | None:
    """The coverage policy of the widening flags given, over the default they change: ``fit``
    widening (``planner.IN_A_MAP``) for a relay of a map (``registry``) not given ``--widen``,
    ``Policy()`` otherwise; None when none is given (``RelayConfig.policy`` then decides).

    Raises:
        InvalidView: the flags make no policy (a negative margin, an overshoot without
            enclose).
    """
    from fanout.relay.core.planner import IN_A_MAP, Policy

    names = ("widen", "margin", "grace", "lead", "overshoot")
    given = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if not given:
        return None
    base = IN_A_MAP if registry is not None and "widen" not in given else Policy()
    return dataclasses.replace(base, **given)


def _limits_given(args: argparse.Namespace) -> dict[str, Any]:
    """The ``RELAY_LIMITS`` flags given, as ``relay.config.Limits`` fields."""
    return fields_given(args, RELAY_LIMITS)
