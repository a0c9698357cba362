"""A throwaway Redis Cluster: for the tests and benchmarks of the shared MQTT match table.

Three masters (no replicas) of this machine's ``redis-server`` (Debian: ``redis-server``),
each on a free loopback port whose cluster bus port (the port + 10000) is free too, in a
temporary folder, with nothing saved to disk; ``redis-cli --cluster create`` joins them. They are
stopped (SIGTERM, then SIGKILL) and the folder removed when the block ends::

    with throwaway_redis_cluster() as nodes:
        RedisCluster(host=nodes[0][0], port=nodes[0][1])

A node may announce another port to its clients (``announce``: a ``testing.proxy`` in front of
it, on ports picked first with ``cluster_ports``): a cluster client then dials every node there.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from fanout.testing.binaries import require
from fanout.testing.ports import LOOPBACK, free_port


class RedisFailed(RuntimeError):
    """A Redis program failed; the message holds its output."""


def cluster_ports(count: int) -> list[int]:
    """``count`` free ports whose cluster bus ports are free too."""
    return [_cluster_port() for _ in range(count)]


def _cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free as well."""
    for _ in range(100):
        port = free_port()
        if port + 10000 >= 65536:
            continue
        with socket.socket() as probe:
            try:
                probe.bind((LOOPBACK, port + 10000))
            except OSError:
                continue
        return port
    raise RedisFailed("found no free port pair for a Redis Cluster node")


@contextlib.contextmanager
def throwaway_redis_cluster(
    masters: int = 3,
    timeout: float = 30.0,
    *,
    ports: list[int] | None = None,
    announce: list[int] | None = None,
) -> Iterator[list[tuple[str, int]]]:
    """Start a Redis Cluster of ``masters`` masters; yield their (host, port).

    Args:
        masters: how many nodes.
        timeout: seconds each node and the cluster may take to be ready.
        ports: the nodes' ports (``cluster_ports``), free ones if None.
        announce: the port each node tells clients to dial it at (its own if None).

    Raises:
        ProgramMissing: redis-server or redis-cli is not installed.
        RedisFailed: a node did not start, or the cluster did not become ready within
            ``timeout`` seconds.
    """
    for program in ("redis-server", "redis-cli"):
        require(program)
    with contextlib.ExitStack() as cleanup:
        home = Path(tempfile.mkdtemp(prefix="fanout-redis-"))
        cleanup.callback(shutil.rmtree, home, ignore_errors=True)
        ports = ports or cluster_ports(masters)
        announced = announce or ports
        for port, told in zip(ports, announced, strict=True):
            extra = ["--cluster-announce-port", str(told)] if told != port else []
            extra += ["--cluster-announce-bus-port", str(port + 10000)] if extra else []
            process = subprocess.Popen(
                [
                    "redis-server",
                    "--port",
                    str(port),
                    "--bind",
                    LOOPBACK,
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    str(home / f"nodes-{port}.conf"),
                    "--dir",
                    str(home),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--logfile",
                    str(home / f"{port}.log"),
                    *extra,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            cleanup.callback(_stop, process)
        for port in ports:
            _wait(lambda port=port: _cli(port, "ping") == "PONG", timeout, f"node {port}")
        created = subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(f"{LOOPBACK}:{p}" for p in ports),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if created.returncode != 0:
            raise RedisFailed(
                f"redis-cli --cluster create failed:\n{created.stdout}{created.stderr}"
            )
        for port in ports:
            _wait(
                lambda port=port: "cluster_state:ok" in _cli(port, "cluster", "info"),
                timeout,
                f"the cluster as seen by {port}",
            )
        yield [(LOOPBACK, port) for port in ports]


def _cli(port: int, *command: str) -> str:
    done = subprocess.run(
        ["redis-cli", "-h", LOOPBACK, "-p", str(port), *command],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    return done.stdout.strip()


def _wait(ready: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise RedisFailed(f"{what} was not ready within {timeout:g} s")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
