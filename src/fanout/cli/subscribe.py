"""``fanout subscribe``: hold one view through one of several relays and print its updates.

Each update is a line, ``tick T seq S: N changed, R rows``, or with ``--json`` one JSON object,
strict JSON (RFC 8259): a float that is not finite (NaN, infinity) has no JSON number and is
written ``null``, as ECMAScript's ``JSON.stringify`` writes it.

The view's language is the dataset's: ``--kind`` when given, else what the relay says of the
dataset in its ``Welcome`` (docs/protocol.md). A relay that says nothing (one older than that)
is taken at the built-in datasets' kinds (``agents``: region views).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime
import decimal
import json
import math
import sys
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from fanout import tls
from fanout.cli import security as cli_security
from fanout.cli.main import BUILTIN_KINDS
from fanout.client import HandshakeRefused, LiveView, SubscriptionError, Update, connect, rank
from fanout.client.following import connect_cluster
from fanout.errors import ConfigError
from fanout.views import View, parse
from fanout.wire.columns import to_python
from fanout.wire.options import Transduce

#: How long to wait before trying the next relay.
RETRY_DELAY = 1.0


async def run(args: argparse.Namespace) -> int:
    """Subscribe as the parsed ``fanout subscribe`` command line says; returns the exit status.

    Raises:
        ConfigError, InvalidView: the command line asks for what cannot be done (a usage error).
        OSError, SubscriptionError, HandshakeRefused: every relay failed, or one refused the
            subscription (a runtime failure).
    """
    relays = [url.strip() for url in args.relay.split(",") if url.strip()]
    if not relays:
        raise ConfigError(f"--relay {args.relay!r}: give at least one relay URL")
    if args.route == "key" and not args.key:
        raise ConfigError("--route key needs --key (subscribers giving one key meet at a relay)")
    if args.key and args.route != "key":
        raise ConfigError("--key is the routing key of --route key; add --route key")
    if args.box and args.kind not in (None, "region"):
        raise ConfigError(f"--box is a region; give the {args.kind} view with --view")
    view = await _view(args, relays)
    args.transduce = transducer(args.transduce)
    if args.route != "order":
        relays = rank(relays, view, args.area, args.key)
    return await _follow(args, view, relays)


def transducer(text: str | None) -> Transduce | None:
    """``--transduce``'s transducer (a ``Transduce`` as JSON), if given.

    Raises:
        ConfigError: it is not one.
    """
    if text is None:
        return None
    try:
        return msgspec.json.decode(text, type=Transduce)
    except msgspec.MsgspecError as exc:
        raise ConfigError(
            f"--transduce {text!r}: not a transducer ({exc}); give JSON such as"
            ' {"name": "window", "params": {"query": "SELECT count(*) AS n FROM history"}}'
        ) from None


async def _view(args: argparse.Namespace, relays: list[str]) -> View:
    """The view of the command line, parsed in its dataset's language."""
    if args.box:
        return parse(f"box:{args.box}", "region")
    kind = args.kind or await dataset_kind(relays, args.dataset, lambda url: _security(args, url))
    return parse(args.view, kind)


async def dataset_kind(
    relays: list[str],
    dataset: str,
    security: Callable[[str], dict[str, Any]] = lambda url: {},
) -> str:
    """The kind of view ``dataset`` takes, as the first relay that answers says
    (``security(url)``: the token and TLS context to connect to one with).

    Raises:
        SubscriptionError: the relay serves no such dataset (code ``invalid_view``, as it would
            answer a subscription to it).
        ConfigError: the relay does not say, and the dataset is not built in: give ``--kind``.
        OSError, HandshakeRefused: no relay answered; the last one's error.
    """
    for turn, url in enumerate(relays, 1):
        try:
            async with connect(url, name="fanout-subscribe", **security(url)) as subscriber:
                kinds = subscriber.datasets
        except (OSError, HandshakeRefused) as exc:
            if turn == len(relays):
                raise
            print(f"relay {url}: {exc}; trying {relays[turn]}", file=sys.stderr)
            continue
        if dataset in kinds:
            return kinds[dataset]
        if kinds:
            served = ", ".join(sorted(kinds))
            raise SubscriptionError(
                "invalid_view", f"unknown dataset {dataset!r} (known: {served})"
            )
        if dataset in BUILTIN_KINDS:
            return BUILTIN_KINDS[dataset]
        raise ConfigError(
            f"relay {url} does not say which views dataset {dataset!r} takes; give --kind"
        )
    raise ConfigError("no relay given")  # run() refuses an empty --relay first


async def _follow(args: argparse.Namespace, view: View, relays: list[str]) -> int:
    """Hold ``view`` on the first relay that serves it, moving to the next when one fails."""
    live: LiveView | None = None
    seen, turn, attempts = 0, 0, 0  # attempts: connections lost in a row with nothing received
    while True:
        url = relays[turn % len(relays)]
        try:
            # A relay in a map of responsibility may redirect the view: followed (docs/cluster.md).
            options = _security(args, url)
            async with connect_cluster(url, name="fanout-subscribe", **options) as cluster:
                live = await cluster.subscribe(
                    view,
                    dataset=args.dataset,
                    rate=args.rate,
                    mode=args.mode,
                    # a transduced view starts again: its window was at the relay it left
                    resume=live if args.mode == "every" and args.transduce is None else None,
                    transduce=args.transduce,
                )
                if cluster.redirects:
                    print(f"redirected to relay {cluster.relay_of(live)}", file=sys.stderr)
                moves = live.moves
                async for update in live:
                    if live.moves != moves:  # its part moved to another relay (a split, a merge)
                        moves = live.moves
                        print(f"moved to relay {cluster.relay_of(live)}", file=sys.stderr)
                    line = json_line(update) if args.json else summary(update, len(live.rows))
                    print(line, flush=True)
                    seen, attempts = seen + 1, 0
                    if args.count and seen >= args.count:
                        return 0
                return 0  # unsubscribed
        except (OSError, SubscriptionError, HandshakeRefused) as exc:
            if isinstance(exc, SubscriptionError | HandshakeRefused) and exc.code not in (
                "closed",
                "moved",  # its part moved to a relay that could not be reached
                "unavailable",  # the relay is full: another may have room
            ):
                raise  # refused: another relay would refuse it too
            turn, attempts = turn + 1, attempts + 1
            if attempts > len(relays):
                raise
            print(f"relay {url}: {exc}; trying {relays[turn % len(relays)]}", file=sys.stderr)
            await asyncio.sleep(RETRY_DELAY)


def summary(update: Update, rows: int) -> str:
    """One update as a line of text."""
    full = "full, " if update.full else ""
    return f"tick {update.tick} seq {update.seq}: {full}{update.changed()} changed, {rows} rows"


def json_line(update: Update) -> str:
    """One update as a line of strict JSON: tick, seq, epoch, full, entered, updated, left.

    Raises:
        ValueError: a value JSON cannot hold (none of a dataset's column types is one).
    """
    document = {
        "tick": update.tick,
        "seq": update.seq,
        "epoch": update.epoch,
        "full": update.full,
        "entered": _rows(update.entered),
        "updated": _rows(update.updated),
        "left": [finite(key) for key in update.left.tolist()],
    }
    return json.dumps(document, allow_nan=False)


def _rows(columns: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    names = list(columns)
    return [
        {name: finite(value) for name, value in zip(names, values, strict=True)}
        for values in zip(*(to_python(columns[name]) for name in names), strict=True)
    ]


def finite(value: Any) -> Any:
    """``value`` as JSON holds it: None for a float that is not finite (JSON has no NaN nor
    infinity); timestamps and dates as ISO 8601 text; decimals as their exact text; bytes as
    base64 text (RFC 4648, with padding)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime.date):  # datetimes too
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def _security(args: argparse.Namespace, url: str) -> dict[str, Any]:
    """The token and TLS context ``connect`` takes, as the flags give them."""
    return {"token": cli_security.token(args), "ssl": tls.for_url(url, args.tls_ca)}
