"""The base install is the subscriber library: it works without any role's extra.

``pip install fanout-live`` brings only the base dependencies of pyproject.toml; the relay's and
the publisher's packages (DuckDB, pyarrow, Spark, psycopg, ...) come with ``fanout-live[relay]``
and ``fanout-live[publisher]``. Each test runs a fresh interpreter in which every package of those
extras fails to import, as it would where it is not installed, and checks what a subscriber does.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: Modules that the packages of an extra install under another name, or beside their own.
ALSO_INSTALLED = {"pyspark": ["py4j"], "psycopg": ["psycopg_binary"]}

#: Run in the fresh interpreter: block the extras' modules, then use the subscriber library
#: against a scripted relay; print the modules imported, as JSON, last.
SUBSCRIBER = """
import importlib.abc, json, sys

BLOCKED = set(sys.argv[1].split(","))

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())

import asyncio
import numpy as np
from websockets.asyncio.server import serve
from fanout.client import connect, rank
from fanout.client.publisher import open_producer
from fanout.views import parse
from fanout.wire import codec
from fanout.wire.columns import encode_columns
from fanout.wire.messages import Push, Subscribe, Subscribed, Welcome

TEXTS = {
    "region": "rel:42:sphere:0,0,5",
    "sql": "select id, amount from orders where amount > 5",
    "topic": "plant/+/temp",
    "path": "/cars/.all?delta",
}
views = {kind: parse(text, kind) for kind, text in TEXTS.items()}
for sub, view in enumerate(views.values()):
    frame = Subscribe(sub, "d", view)
    assert codec.to_relay().decode(codec.encode(frame)) == frame
    assert len(rank(["ws://a", "ws://b"], view)) == 2
assert str(views["sql"]) == "SELECT id, amount FROM orders WHERE amount > 5"

async def relay(websocket):
    await websocket.recv()
    await websocket.send(codec.encode(Welcome(1, "scripted", "s")))
    request = codec.to_relay().decode(await websocket.recv())
    await websocket.send(codec.encode(Subscribed(request.sub, "id", ["id", "x"])))
    rows = encode_columns({"id": np.array([7]), "x": np.array([1.5])})
    empty = encode_columns({"id": np.zeros(0, dtype=np.int64)})
    await websocket.send(codec.encode(Push(request.sub, 1, 1, 1, 0.0, True, rows, empty, empty)))
    await websocket.wait_closed()

async def subscribe():
    async with serve(relay, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}") as subscriber:
            live = await subscriber.subscribe(views["region"], dataset="agents")
            async for update in live:
                return update.full, live.rows

assert asyncio.run(subscribe()) == (True, {7: {"id": 7, "x": 1.5}})
print(json.dumps(sorted(sys.modules)))
"""


def _module(requirement: str) -> str:
    """The module a requirement such as ``psycopg[binary]>=3.2`` installs."""
    name = re.split(r"[\\[<>=!~; ]", requirement, maxsplit=1)[0]
    return name.lower().replace("-", "_")


def _extras_modules() -> set[str]:
    """Every module of every role's extra that the base install does not bring."""
    base = {_module(r) for r in PYPROJECT["project"]["dependencies"]}
    extras = PYPROJECT["project"]["optional-dependencies"]
    modules = {_module(r) for role in ("relay", "publisher", "demo") for r in extras[role]}
    modules -= base | {"fanout_live"}  # the demo extra names the relay's and the publisher's
    return modules | {also for module in modules for also in ALSO_INSTALLED.get(module, [])}


def test_the_extras_hold_the_relays_and_the_publishers_packages() -> None:
    assert {"pyspark", "duckdb", "psycopg", "pyarrow", "pandas", "rich"} <= _extras_modules()
    base = {_module(r) for r in PYPROJECT["project"]["dependencies"]}
    assert base == {"numpy", "msgspec", "websockets", "sqlglot"}


def test_the_subscriber_library_works_with_the_base_install_alone() -> None:
    blocked = _extras_modules()
    result = subprocess.run(
        [sys.executable, "-c", SUBSCRIBER, ",".join(sorted(blocked))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    imported = set(json.loads(result.stdout.splitlines()[-1]))
    assert not {name.partition(".")[0] for name in imported} & blocked
    assert not {"pyspark", "duckdb", "psycopg"} & imported
