"""A watcher of the auction: follows one category by label (``find_by_label``) and prints every
change to it as it is snooped. With ``--until-closed`` it stops once every item it follows is
closed and prints the collection as one JSON line (key -> item)::

    python examples/auction/watcher.py --nats nats://127.0.0.1:4222 --label 'computer.hardware.>'
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from fanout.cache.client import SnoopyCache


async def main(args: argparse.Namespace) -> int:
    async with await SnoopyCache.connect(
        args.nats, args.domain, name="watcher", load_wait=args.load_wait
    ) as cache:
        changes = cache.events()  # from now on: nothing taken below is missed
        following = await cache.find_by_label("item", args.label)
        print(f"following {args.label}: {len(following.keys())} items", flush=True)
        async with asyncio.timeout(args.timeout):
            async for change in changes:
                if change.ref[0] != "item" or change.ref[1] not in following.keys() | {
                    change.ref[1]
                }:
                    continue
                row = change.row or {}
                print(
                    f"{change.kind:12} item {change.ref[1]} v{change.version}"
                    f" high bid {row.get('high_bid')} by {row.get('high_bidder')}"
                    f" {'closed' if row.get('closed') else ''}",
                    flush=True,
                )
                items = following.items()
                if args.until_closed and items and all(row["closed"] for row in items.values()):
                    break
        print(json.dumps({str(key): row for key, row in sorted(following.items().items())}))
    return 0


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nats", default="nats://127.0.0.1:4222")
    parser.add_argument("--domain", default="auction")
    parser.add_argument(
        "--load-wait", type=float, default=180.0, help="seconds to wait for the publisher at most"
    )
    parser.add_argument("--label", default="computer.>", help="a label pattern (* and > wildcards)")
    parser.add_argument("--until-closed", action="store_true")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to watch at most")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
