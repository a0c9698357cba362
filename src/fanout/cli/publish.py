"""``fanout publish``: write rows to an ingest dataset from the shell, as ``mosquitto_pub`` does.

Rows are JSON objects, one an argument, or one a line of stdin when none is given. They go
through a relay (which forwards them to the publisher, as ``Subscriber.publish`` does) or to
the publisher itself (``open_producer``), in requests of at most ``--batch`` rows, each
acknowledged once durable in the ingest log. A refusal (unknown dataset, a column missing or of
the wrong type, a token not granting ``producer``) ends the command with the publisher's reason,
after saying how many rows were accepted before it. Walkthrough: docs/cli.md.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from fanout import tls
from fanout.cli import security as cli_security
from fanout.cli.relay import Command
from fanout.errors import ConfigError, FanoutError

#: Rows sent in one request at most (each request waits for its acknowledgement).
DEFAULT_BATCH = 1000

Row = dict[str, Any]


def publish_parser(commands: Any, command: Command) -> None:
    """Add ``fanout publish`` to ``commands``."""
    parser = command(
        commands,
        "publish",
        help="publish rows (JSON objects) to an ingest dataset",
        description=(
            'Upsert rows into an ingest dataset (source = "ingest"): each ROW is a JSON object'
            ' giving every column of the dataset, e.g. \'{"topic": "plant/1/temp", "value":'
            " 20.5}'. Without ROW arguments, rows are read from stdin, one JSON object a line."
            " Prints how many rows were accepted, once they are durable; a row refused ends the"
            " command with the reason, exit status 1; a line that is not a JSON object, 2."
            " Token: roles subscriber and producer through a relay, producer to the publisher"
            " (docs/cli.md)."
        ),
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--relay", metavar="URL", help="a relay, ws://HOST:PORT, which forwards the rows"
    )
    where.add_argument(
        "--publisher", metavar="URL", help="the publisher's control plane, ws://HOST:PORT"
    )
    parser.add_argument("dataset", metavar="DATASET", help="an ingest dataset")
    parser.add_argument(
        "rows", metavar="ROW", nargs="*", help="a row as a JSON object (default: stdin)"
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=DEFAULT_BATCH,
        help=f"rows a request carries at most (default: {DEFAULT_BATCH})",
    )
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    cli_security.add_client(parser)
    parser.set_defaults(run=run_publish)


def run_publish(args: argparse.Namespace) -> int:
    """Run ``fanout publish``."""
    if args.batch < 1:
        raise ConfigError("--batch must be 1 or more")
    if args.rows:  # all read before connecting: a typo publishes nothing
        rows: Iterable[list[Row]] = list(batches(args.rows, "argument", args.batch))
    else:  # read as they come: a pipe's rows are published while it runs
        rows = batches((line for line in sys.stdin if line.strip()), "line", args.batch)
    pending = iter(rows)
    if (batch := next(pending, None)) is None:  # not even a connection for nothing to send
        print("no rows given: nothing published", file=sys.stderr)
        return 0
    accepted, first, last = asyncio.run(_publish(args, itertools.chain([batch], pending)))
    if args.json:
        result = {"dataset": args.dataset, "rows": accepted, "first": first, "last": last}
        print(json.dumps(result))
    else:
        print(f"published {accepted} row(s) to {args.dataset}: ingest log offsets {first}..{last}")
    return 0


def batches(texts: Iterable[str], where: str, size: int) -> Iterator[list[Row]]:
    """The rows of ``texts`` (JSON objects), in lists of at most ``size``, each row's columns
    in the first row's order.

    Raises:
        ConfigError: a text is not a JSON object, or names other columns than the first.
    """
    batch: list[Row] = []
    columns: list[str] | None = None
    for number, text in enumerate(texts, 1):
        row = _row(text, f"{where} {number}")
        if columns is None:
            columns = list(row)
        elif set(row) != set(columns):
            raise ConfigError(
                f"{where} {number}: columns {sorted(row)}, the first row's {sorted(columns)}"
            )
        batch.append({name: row[name] for name in columns})
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _row(text: str, where: str) -> Row:
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not JSON ({exc}): {text.strip()[:80]!r}") from None
    if not isinstance(row, dict) or not row:
        raise ConfigError(f"{where}: not a JSON object of columns: {text.strip()[:80]!r}")
    return row


async def _publish(args: argparse.Namespace, rows: Iterable[list[Row]]) -> tuple[int, int, int]:
    """Send ``rows``, batch after batch; returns (rows accepted, first, last offset).

    Raises:
        FanoutError: a row was refused, by the publisher (``SubscriptionError``) or as not
            JSON (``ConfigError``), after saying on stderr how many rows were accepted first.
    """
    from fanout.client import connect  # noqa: PLC0415 (as cli/main.py: `fanout --help` stays fast)
    from fanout.client.publisher import open_producer  # noqa: PLC0415 (as cli/main.py: `fanout --help` stays fast)

    url = args.relay or args.publisher
    token, ssl = cli_security.token(args), tls.for_url(url, args.tls_ca)
    accepted, first, last = 0, -1, -1
    if args.relay is not None:
        opened: Any = connect(url, name="fanout publish", token=token, ssl=ssl)
    else:
        opened = open_producer(url, token=token, ssl=ssl)
    async with opened as client:
        try:
            for batch in rows:
                start, last = await client.publish(args.dataset, batch)
                first = start if first < 0 else first
                accepted += len(batch)
        except FanoutError:
            if accepted:  # the error that follows says why the rest was not
                print(f"fanout publish: {accepted} row(s) accepted first", file=sys.stderr)
            raise
    return accepted, first, last
