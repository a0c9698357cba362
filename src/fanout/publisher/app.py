"""Running a publisher: Spark session, pipeline, control plane, until stopped."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from fanout.publisher.control import ControlPlane
from fanout.publisher.datasets import Dataset, agents
from fanout.publisher.pipeline import Pipeline, spark_session
from fanout.publisher.registry import Registry
from fanout.publisher.service import DatasetService
from fanout.publisher.sources.simulation import SimulationParams

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PublisherConfig:
    """How a publisher runs.

    Attributes:
        host, port: where the control plane listens (port 0: any free port).
        master: Spark master URL; None uses ``local[*]`` (or spark-submit's).
        state_dir: checkpoint and stream identity; reuse it to restart where it stopped.
        simulation: the built-in ``agents`` dataset's simulation (when ``datasets`` is empty).
        datasets: the datasets to serve (from ``fanout.toml``); each keeps its state in
            ``state_dir / <name>``.
        trigger: seconds between micro-batch starts (0: as fast as Spark goes).
    """

    host: str = "127.0.0.1"
    port: int = 7700
    master: str | None = None
    state_dir: Path = Path("var/publisher")
    simulation: SimulationParams = field(default_factory=SimulationParams)
    datasets: list[Dataset] = field(default_factory=list)
    trigger: float = 0.0


def run(config: PublisherConfig) -> int:
    """Run until SIGINT/SIGTERM or until a streaming query fails; returns an exit status.

    Prints ``fanout publisher ready ws://HOST:PORT`` on stdout once relays can connect.
    """
    spark = spark_session(config.master)
    registry = Registry()
    pipelines: dict[str, Pipeline] = {}
    control = ControlPlane(DatasetService(pipelines), registry)
    for dataset in config.datasets or [agents(config.simulation)]:
        state_dir = config.state_dir / dataset.name
        pipelines[dataset.name] = Pipeline(spark, dataset, registry, control.deliver, state_dir)
    port = control.start_in_thread(config.host, config.port)
    queries = [pipeline.start(config.trigger) for pipeline in pipelines.values()]
    print(f"fanout publisher ready ws://{config.host}:{port}", flush=True)
    stopping = threading.Event()

    def stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    status = 0
    while not stopping.wait(1.0):
        ended = [query for query in queries if not query.isActive]
        for query in ended:
            error = query.exception()
            message = f"failed: {error}" if error else "stopped"
            print(f"fanout publisher: streaming query {query.name} {message}", file=sys.stderr)
        if ended:
            status = 1
            break
    for query in queries:
        query.stop()
    control.stop()
    spark.stop()
    return status
