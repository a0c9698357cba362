"""Put the auction's items on sale (and optionally close it): ``schema.sql``, then N items in
categories such as ``computer.hardware.misc``::

    python examples/auction/items.py --db postgresql://... --items 20
    python examples/auction/items.py --db postgresql://... --close
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import psycopg

CATEGORIES = (
    "computer.hardware.misc",
    "computer.hardware.storage",
    "computer.software",
    "garden.tools",
)


def put_on_sale(db: str, items: int) -> None:
    """Create the tables and items 1..``items``, cycling through ``CATEGORIES``."""
    with psycopg.connect(db, autocommit=True) as connection:
        connection.execute((Path(__file__).parent / "schema.sql").read_text())
        for key in range(1, items + 1):
            connection.execute(
                "INSERT INTO items (id, title, category) VALUES (%s, %s, %s)"
                " ON CONFLICT (id) DO NOTHING",
                (key, f"lot {key}", CATEGORIES[key % len(CATEGORIES)]),
            )


def close(db: str) -> None:
    """Close the auction: no bid is taken after this commits."""
    with psycopg.connect(db, autocommit=True) as connection:
        connection.execute("UPDATE items SET closed = true")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--close", action="store_true", help="close the auction instead")
    args = parser.parse_args(sys.argv[1:])
    if args.close:
        close(args.db)
    else:
        put_on_sale(args.db, args.items)
