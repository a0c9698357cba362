"""Running a publisher: Spark session, pipeline, control plane, until stopped."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import pyarrow as pa

from fanout.errors import InvalidView
from fanout.publisher.control import ControlPlane
from fanout.publisher.datasets import agents
from fanout.publisher.pipeline import Pipeline, spark_session
from fanout.publisher.registry import Registry
from fanout.publisher.sources.simulation import SimulationParams
from fanout.views import View

log = logging.getLogger(__name__)

#: How long a read-state request may wait for the state to reach the tick asked for.
READ_TIMEOUT = 30.0


@dataclass(frozen=True)
class PublisherConfig:
    """How a publisher runs.

    Attributes:
        host, port: where the control plane listens (port 0: any free port).
        master: Spark master URL; None uses ``local[*]`` (or spark-submit's).
        state_dir: checkpoint and stream identity; reuse it to restart where it stopped.
        simulation: the built-in ``agents`` dataset's simulation.
        trigger: seconds between micro-batch starts (0: as fast as Spark goes).
    """

    host: str = "127.0.0.1"
    port: int = 7700
    master: str | None = None
    state_dir: Path = Path("var/publisher")
    simulation: SimulationParams = field(default_factory=SimulationParams)
    trigger: float = 0.0


def run(config: PublisherConfig) -> int:
    """Run until SIGINT/SIGTERM or until the streaming query fails; returns an exit status.

    Prints ``fanout publisher ready ws://HOST:PORT`` on stdout once relays can connect.
    """
    spark = spark_session(config.master)
    dataset = agents(config.simulation)
    registry = Registry()

    def read_state(name: str, view: View, tick: int) -> tuple[int, pa.Table]:
        if name != dataset.name:
            raise InvalidView(f"unknown dataset {name!r}")
        return pipeline.read(view, tick, READ_TIMEOUT)

    control = ControlPlane({dataset.name: dataset}, registry, read_state)
    pipeline = Pipeline(spark, dataset, registry, control.deliver, config.state_dir)
    port = control.start_in_thread(config.host, config.port)
    query = pipeline.start(config.trigger)
    print(f"fanout publisher ready ws://{config.host}:{port}", flush=True)
    stopping = threading.Event()

    def stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    status = 0
    while not stopping.is_set():
        if query.awaitTermination(1):
            error = query.exception()
            if error is not None:
                print(f"fanout publisher: streaming query failed: {error}", file=sys.stderr)
                status = 1
            break
    query.stop()
    control.stop()
    spark.stop()
    return status
