"""``fanout demo`` and ``fanout publisher``: their flags, and the built-in simulation's
(``fanout.cli.main`` has the command line's other parts)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from fanout.cli import security as cli_security
from fanout.cli.relay import Command
from fanout.demoload import demo_period


def add_simulation(
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


def simulation(args: argparse.Namespace, max_ticks: int = 0) -> Any:
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


def demo_parser(commands: Any, command: Command) -> None:
    """Add ``fanout demo`` to ``commands``."""
    parser = command(
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
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the result as one JSON object on stdout (updates, lags, the check, bytes"
        " each way); status lines go to stderr",
    )
    # The demo's micro-batches hold each agent's last move, so one spanning many ticks is no
    # bigger: after Spark's slow first micro-batch the demo catches up with the clock at once.
    add_simulation(parser, max_ticks_per_batch=600)
    # A load this machine keeps near Spark's floor (fanout.demoload); --period overrides it.
    parser.set_defaults(run=run_demo, period=demo_period(10_000, 10.0))


def run_demo(args: argparse.Namespace) -> int:
    """Run ``fanout demo``."""
    from fanout.demo import DemoConfig, run_demo

    config = DemoConfig(
        duration=args.duration,
        subscribers=args.subscribers,
        box=args.box,
        rate=args.rate,
        simulation=simulation(args),
        state_dir=args.state_dir,
        plain=args.plain,
        log_level=args.log_level,
        json=args.json,
        log_format=args.log_format,
    )
    return run_demo(config)


# -- publisher -------------------------------------------------------------------------------


def publisher_parser(commands: Any, command: Command) -> None:
    """Add ``fanout publisher`` to ``commands``."""
    parser = command(
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
        "--trim-every",
        type=float,
        default=None,
        help="seconds between two malloc_trim(0) in the driver, giving glibc's free pages back;"
        " 0: never (docs/operations.md) (default: 10)",
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
    parser.add_argument(
        "--state-store",
        choices=["hdfs", "rocksdb"],
        default="hdfs",
        help="where Spark keeps the built-in dataset's latest rows: its HDFS-backed store"
        " (default) or RocksDB; a --config dataset says it with state_store"
        " (docs/configuration.md)",
    )
    add_simulation(parser)
    cli_security.add_server(parser)
    parser.set_defaults(run=run_publisher)


def run_publisher(args: argparse.Namespace) -> int:
    """Run ``fanout publisher``."""
    from fanout.publisher.app import run
    from fanout.publisher.config import PublisherSettings, load_config
    from fanout.publisher.datasets import agents

    if args.config is not None:
        settings = load_config(args.config)
    else:
        built_in = replace(agents(simulation(args, args.max_ticks)), state_store=args.state_store)
        settings = PublisherSettings(datasets={built_in.name: built_in})
    settings = settings.override(
        host=args.host,
        port=args.port,
        master=args.master,
        state_dir=args.state_dir,
        trigger=args.trigger,
        trim_every=args.trim_every,
        log=args.log,
        auth=cli_security.auth_config(args),
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
    )
    return run(settings)
