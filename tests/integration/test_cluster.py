"""The publisher runs unchanged on a Spark standalone cluster (issue 3, item 8).

A master and a worker are started from the pyspark wheel's own ``spark-class`` on loopback; the
publisher is started with ``--master spark://...``; its Python data source then runs in the
worker's executor, not in the driver. A relay and a subscriber check that rows flow and equal the
publisher's state.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pyspark
import pytest
import pytest_asyncio

from fanout.client import connect
from fanout.client.publisher import open_reader
from fanout.launch import Child, Children
from fanout.testing.ports import free_port
from fanout.testing.wait import eventually
from fanout.views import Box

from .conftest import settle

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"


async def daemon(args: list[str], log: Path, ready: str) -> asyncio.subprocess.Process:
    """Start a Spark daemon and wait until its log says ``ready``."""
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            str(SPARK_CLASS), *args, stdout=out, stderr=asyncio.subprocess.STDOUT, env=env
        )

    def started() -> bool:
        text = log.read_text(errors="replace")
        if process.returncode is not None:
            raise RuntimeError(f"{args[0]} exited: {text[-2000:]}")
        return ready in text

    await eventually(started, timeout=120, every=0.5, in_thread=True, what=f"{args[0]} ready")
    return process


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path: Path) -> AsyncIterator[str]:
    """A standalone master and one worker (2 cores, 2 GiB) on loopback; yields the master URL."""
    port, web = free_port(), free_port()
    master = await daemon(
        [
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(web),
        ],
        tmp_path / "master.log",
        "I have been elected leader",
    )
    url = f"spark://127.0.0.1:{port}"
    worker = await daemon(
        [
            "org.apache.spark.deploy.worker.Worker",
            url,
            "--cores",
            "2",
            "--memory",
            "2g",
            "--webui-port",
            str(free_port()),
            "--work-dir",
            str(tmp_path / "work"),
        ],
        tmp_path / "worker.log",
        "Successfully registered with master",
    )
    try:
        yield url
    finally:
        for process in (worker, master):
            process.terminate()
            await process.wait()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def deployment(
    children: Children, cluster: str, tmp_path: Path
) -> AsyncIterator[tuple[Child, Child]]:
    publisher = await children.start(
        "publisher",
        [
            "--master",
            cluster,
            "--port",
            "0",
            "--state-dir",
            str(tmp_path / "state"),
            "--agents",
            "1000",
            "--log-level",
            "info",
        ],
        tmp_path / "publisher.log",
    )
    relay = await children.start(
        "relay", ["--publisher", publisher.url, "--port", "0"], tmp_path / "relay.log"
    )
    try:
        yield publisher, relay
    finally:
        await relay.stop()
        await publisher.stop()


async def test_a_subscriber_sees_the_clusters_state(
    deployment: tuple[Child, Child], tmp_path: Path
) -> None:
    publisher, relay = deployment
    region = Box((0, 0), (600, 600))
    async with connect(relay.url) as subscriber:
        view = await subscriber.subscribe(region)
        await settle(view, 3, timeout=180)
        tick, rows = view.tick, dict(view.rows)
    async with open_reader(publisher.url) as reader:
        _, state = await reader.read("agents", region, tick)
    inside = np.flatnonzero(region.match(state["x"], state["y"]))
    assert sorted(rows) == sorted(state["id"][inside].tolist())
    assert rows
    # the source ran in the worker's executor, not in the driver
    executors = list((tmp_path / "work").glob("app-*/*/stderr"))
    assert executors, "the worker started no executor"
