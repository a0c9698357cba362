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
import json
import os
from collections.abc import Sequence
from typing import Any

from websockets.exceptions import WebSocketException

from fanout import DISTRIBUTION, __version__, logs
from fanout.cli import datasets as cli_datasets
from fanout.cli import passwd as cli_passwd
from fanout.cli import publish as cli_publish
from fanout.cli import publisher as cli_publisher
from fanout.cli import relay as cli_relay
from fanout.cli import security as cli_security
from fanout.errors import ConfigError, FanoutError, InvalidView

DEFAULT_RELAY = "ws://127.0.0.1:7701"
#: Datasets built into the publisher, by the view kind they take.
BUILTIN_KINDS = {"agents": "region"}
#: Exit statuses.
FAILURE, USAGE = 1, 2
#: The extra each command needs beyond the base install (docs/deploy.md).
EXTRAS = {
    "relay": "relay",
    "publisher": "publisher",
    "demo": "demo",
    "mount": "mount",
    "datasets": "relay",  # --publisher only: its rows and rates are read with prometheus_client
}
#: The modules those extras install: one missing is a missing extra, not a bug.
EXTRA_MODULES = frozenset(
    {"duckdb", "pyarrow", "prometheus_client", "pyspark", "py4j", "pandas", "psycopg", "rich"}
    | {"mfusepy"}
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0, ``FAILURE`` or ``USAGE``)."""
    parser = _parser()
    args = parser.parse_args(argv)
    logs.configure(args.log_level, args.log_format)
    try:
        status: int = args.run(args)
    except KeyboardInterrupt:
        return 130
    except (ConfigError, InvalidView) as exc:  # what the command line asks for cannot be done
        logs.failed(args.command, str(exc))
        return USAGE
    except (FanoutError, OSError, WebSocketException) as exc:  # what failed while running
        logs.failed(args.command, str(exc))
        return FAILURE
    except ModuleNotFoundError as exc:
        module = (exc.name or "").partition(".")[0]
        if module not in EXTRA_MODULES or args.command not in EXTRAS:
            raise
        extra = EXTRAS[args.command]
        logs.failed(
            args.command,
            f"needs {module}, which is not installed here:"
            f" pip install '{DISTRIBUTION}[{extra}]' (docs/deploy.md)",
        )
        return FAILURE
    return status


def _version() -> str:
    """fanout's version, as installed (``0+unknown`` from a source tree never installed)."""
    return __version__


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
    cli_publisher.demo_parser(commands, _command)
    cli_publisher.publisher_parser(commands, _command)
    cli_relay.relay_parser(commands, _command)
    _subscribe_parser(commands)
    _explain_parser(commands)
    cli_datasets.datasets_parser(commands, _command)
    cli_publish.publish_parser(commands, _command)
    cli_security.token_parser(commands, _command)
    cli_passwd.passwd_parser(commands, _command)
    _mount_parser(commands)
    return parser


def _command(commands: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """Add a subcommand; every subcommand takes ``--log-level`` and ``--log-format``."""
    parser: argparse.ArgumentParser = commands.add_parser(name, **kwargs)
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="what to log on stderr (default: warning)",
    )
    parser.add_argument(
        "--log-format",
        default="text",
        choices=logs.FORMATS,
        help="how to log: text lines, or json, one object a line (default: text)",
    )
    return parser


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
    parser.add_argument(
        "--transduce",
        metavar="JSON",
        help=(
            'a transducer the relay runs over the view, e.g. \'{"name": "window", "params":'
            ' {"query": "SELECT count(*) AS n FROM history"}}\': the updates are its output'
            " (docs/transducers.md)"
        ),
    )
    cli_security.add_client(parser)
    parser.set_defaults(run=_run_subscribe)


def _run_subscribe(args: argparse.Namespace) -> int:
    from fanout.cli.subscribe import run

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
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object: kind, view, have, covered, residual, residual_share (and"
        " effective_view or refused with --rule); with --relay, the relay's answer",
    )
    parser.add_argument(
        "--relay",
        default=None,
        metavar="URL",
        help="explain against this running relay: what it holds, covers the view with, would"
        " acquire, and the view's cost (its admin API: a token with role admin)",
    )
    parser.add_argument(
        "--rate", type=float, default=None, help="with --relay: pushes/s to cost (default 10)"
    )
    cli_security.add_client(parser)
    parser.set_defaults(run=_run_explain)


def _run_explain(args: argparse.Namespace) -> int:
    from fanout.cli import explain as cli_explain
    from fanout.views.explain import explain
    from fanout.views.text import parse, to_text

    if args.relay is not None:
        if args.have or args.kind:
            raise ConfigError("--have and --kind are for explaining offline; a relay knows both")
        args.rate = 10.0 if args.rate is None else args.rate
        return cli_explain.run(args)
    offline = {"--rate": args.rate, "--token-file": args.token_file, "--tls-ca": args.tls_ca}
    for flag, value in offline.items():
        if value is not None:
            raise ConfigError(f"{flag} is for explaining against a relay (--relay)")
    kind = args.kind or BUILTIN_KINDS.get(args.dataset)
    if kind is None:
        raise ConfigError(
            f"dataset {args.dataset!r} is not built in; say its view language with --kind"
        )
    view = args.view
    said: dict[str, Any] = {}
    if args.rule:
        from fanout.relay.core.rules import effective

        rules = cli_security.rules_of(args.rule)
        try:
            view = effective(parse(view, kind), args.dataset, kind, rules)
        except FanoutError as exc:  # Unauthorized: what a relay would refuse, and why
            code = getattr(exc, "code", "error")
            said = {"refused": {"code": code, "message": str(exc)}}
            print(json.dumps(said) if args.json else f"EFFECTIVE VIEW: refused ({code}): {exc}")
            return FAILURE
        said = {"rules": len(args.rule), "effective_view": to_text(view)}
        if not args.json:
            print(f"EFFECTIVE VIEW under {len(args.rule)} rule(s): {to_text(view)}")
    explanation = explain(kind, view, args.have)
    print(json.dumps({**explanation.as_json(), **said}) if args.json else explanation.render())
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
