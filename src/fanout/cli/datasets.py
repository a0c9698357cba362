"""``fanout datasets``: the catalog a relay or the publisher serves, as a table or JSON.

From a relay, its ``GET /v1/datasets`` (docs/http.md), which shows only the datasets the token's
rules name; from the publisher, the ``Catalog`` it sends every connection on its control plane
(as a ``reader``), with each dataset's rows and rate of change read from its ``GET /metrics``
on the same port. A relay holds only its subscribers' views, so it has no whole-dataset figures
to give, only the rows it holds: ask the publisher for those. Walkthrough: docs/cli.md.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fanout import tls
from fanout.cli import security as cli_security
from fanout.cli.relay import Command
from fanout.errors import ConfigError, FanoutError

#: ``GET /v1/datasets`` on a relay's port (``fanout.http.server.DATASETS``).
RELAY_PATH = "/v1/datasets"
#: The publisher's per-dataset figures on ``GET /metrics`` (``publisher.service``).
MIRROR_ROWS = "fanout_publisher_mirror_rows"
ROWS_CHANGED = "fanout_publisher_rows_changed_total"


def datasets_parser(commands: Any, command: Command) -> None:
    """Add ``fanout datasets`` to ``commands``."""
    parser = command(
        commands,
        "datasets",
        help="list the datasets a relay or the publisher serves: kinds, keys, columns, rates",
        description=(
            "Print the catalog: each dataset's name, kind (its index: space, sql, topic, path,"
            " objects), the view language it takes, its key and its columns with their types."
            " From the publisher also its live rows (as the publisher's driver holds them) and"
            " its rate of change, rows changed a second over --sample seconds (token: role"
            " relay). From a relay the rows it holds, its subscribers' views' union; it lists"
            " only the datasets the token may read (docs/cli.md)."
        ),
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--relay", metavar="URL", help="a relay, ws://HOST:PORT")
    where.add_argument(
        "--publisher", metavar="URL", help="the publisher's control plane, ws://HOST:PORT"
    )
    parser.add_argument(
        "--sample",
        type=float,
        default=1.0,
        help="with --publisher: seconds over which the rate of change is measured; 0 skips"
        " the rates (default: 1)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    cli_security.add_client(parser)
    parser.set_defaults(run=run_datasets)


def run_datasets(args: argparse.Namespace) -> int:
    """Run ``fanout datasets``: print the catalog."""
    if args.sample < 0:
        raise ConfigError("--sample must be 0 or more seconds")
    if args.relay is not None:
        described = from_relay(
            args.relay, cli_security.token(args), tls.for_url(args.relay, args.tls_ca)
        )
    else:
        described = asyncio.run(from_publisher(args))
    if args.json:
        print(json.dumps({"datasets": described}))
    else:
        print(table(described, RELAY_FIGURES if args.relay is not None else PUBLISHER_FIGURES))
    return 0


def from_relay(url: str, token: str, ssl: Any) -> list[dict[str, Any]]:
    """The datasets ``GET /v1/datasets`` of the relay at ``url`` describes.

    Raises:
        FanoutError: the relay refused (a token it does not take, say), with its reason.
        OSError: it cannot be reached.
    """
    parts = urllib.parse.urlsplit(url)
    scheme = "https" if parts.scheme in ("wss", "https") else "http"
    request = urllib.request.Request(f"{scheme}://{parts.netloc}{RELAY_PATH}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=ssl) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise FanoutError(f"the relay refused: {_refusal(exc)}") from None
    except urllib.error.URLError as exc:
        raise OSError(f"cannot reach the relay at {url}: {exc.reason}") from None
    return [
        {
            "name": info["name"],
            "kind": info["index"],
            "view": info["view"],
            "key": info["key"],
            "columns": info["columns"],
            "index_columns": info["index_columns"],
            "rows": None,
            "rate": None,
            "held": info.get("rows_held"),  # None from a relay older than the field
        }
        for info in body["datasets"]
    ]


async def from_publisher(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The publisher's ``Catalog``, each dataset with its rows and rate from ``/metrics``.

    Raises:
        SubscriptionError, HandshakeRefused: the publisher refused the connection (a token
            not granting ``relay``, say).
        OSError: it cannot be reached.
    """
    from fanout.client.publisher import open_reader  # noqa: PLC0415 (as cli/main.py: `fanout --help` stays fast)
    from fanout.metrics import scrape  # noqa: PLC0415 (the relay extra's: missing, said before connecting)
    from fanout.views import registry  # noqa: PLC0415 (as cli/main.py: `fanout --help` stays fast)

    ssl = tls.for_url(args.publisher, args.tls_ca)
    async with open_reader(args.publisher, token=cli_security.token(args), ssl=ssl) as reader:
        infos = await reader.catalog()
    figures = await asyncio.to_thread(
        _figures, functools.partial(scrape, args.publisher, ssl=ssl), args.sample
    )
    return [
        {
            "name": info.name,
            "kind": info.index,
            "view": registry.language(info.index),
            "key": info.key,
            "columns": info.columns,
            "index_columns": info.index_columns,
            **figures.get(info.name, {"rows": None, "rate": None}),
            "held": None,
        }
        for info in infos.values()
    ]


def _figures(scrape: Callable[[], dict[str, float]], sample: float) -> dict[str, dict[str, Any]]:
    """Each dataset's live rows (None while the driver holds none) and rows changed a second
    over ``sample`` seconds (None with ``sample`` 0), from two reads of ``GET /metrics``
    (``scrape``, blocking)."""
    first, started = scrape(), time.monotonic()
    if sample > 0:
        time.sleep(sample)
        last, elapsed = scrape(), time.monotonic() - started
    figures: dict[str, dict[str, Any]] = {}
    for name, value in first.items():
        dataset = _dataset_label(name, MIRROR_ROWS)
        if dataset is None:
            continue
        rows = (last if sample > 0 else first).get(name, value)
        changed = f'{ROWS_CHANGED}{{dataset="{dataset}"}}'
        rate = None
        if sample > 0 and changed in first and changed in last:
            rate = (last[changed] - first[changed]) / elapsed
        figures[dataset] = {"rows": int(rows) if rows > 0 else None, "rate": rate}
    return figures


def _dataset_label(sample: str, metric: str) -> str | None:
    """The dataset ``sample`` (``metric{dataset="x"}``) is of, or None if of another metric."""
    prefix = f'{metric}{{dataset="'
    if not (sample.startswith(prefix) and sample.endswith('"}')):
        return None
    return sample[len(prefix) : -2]


def _refusal(exc: urllib.error.HTTPError) -> str:
    """An HTTP refusal as the relay explained it (``{"error", "message"}``), else its status."""
    try:
        body = json.loads(exc.read())
        return f"{body['error']}: {body['message']}"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {exc.code} {exc.reason}"


#: The figures a table shows, (field, heading, format): what the publisher knows of a whole
#: dataset, what a relay holds of it.
PUBLISHER_FIGURES = (("rows", "ROWS", "{:d}"), ("rate", "ROWS/S", "{:.1f}"))
RELAY_FIGURES = (("held", "HELD", "{:d}"),)


def table(datasets: Sequence[Mapping[str, Any]], figures: Sequence[tuple[str, str, str]]) -> str:
    """The catalog as a table for people: one line a dataset, ``figures`` (``-`` for one not
    known), its columns as ``name:type``."""
    if not datasets:
        return "no datasets (a relay not connected upstream yet has none)"
    header = ("DATASET", "KIND", "KEY", *(heading for _, heading, _ in figures), "COLUMNS")
    lines = [
        (
            info["name"],
            f"{info['kind']} ({info['view']})",
            info["key"],
            *(
                "-" if info[field] is None else shown.format(info[field])
                for field, _, shown in figures
            ),
            " ".join(f"{name}:{kind}" for name, kind in info["columns"].items()),
        )
        for info in datasets
    ]
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]])
        for row in [header, *lines]
    )
