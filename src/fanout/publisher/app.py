"""Running a publisher: Spark session, pipeline, control plane, until stopped."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType

from pyspark.errors import PySparkException

from fanout.publisher.busconnector import BusConnector
from fanout.publisher.config import PublisherSettings
from fanout.publisher.control import ControlPlane
from fanout.publisher.log import open_log
from fanout.publisher.objects import ObjectTable, object_type
from fanout.publisher.pipeline import Pipeline
from fanout.publisher.registry import Registry
from fanout.publisher.service import DatasetService
from fanout.publisher.spark import spark_session

log = logging.getLogger(__name__)


def run(config: PublisherSettings) -> int:
    """Run until SIGINT/SIGTERM or until a streaming query fails; returns an exit status.

    Prints ``fanout publisher ready ws://HOST:PORT`` on stdout once relays can connect.
    """
    spark = spark_session(config.master)
    registry = Registry(config.max_primitives)
    pipelines: dict[str, Pipeline] = {}
    control = ControlPlane(DatasetService(pipelines), registry)
    batch_log = open_log(config.log_url())
    bus = _bus(config)
    for dataset in config.datasets.values():
        pipelines[dataset.name] = Pipeline(
            spark,
            dataset,
            registry=registry,
            sink=control.deliver,
            state_dir=config.state_dir / dataset.name,
            log=batch_log,
            retention_seconds=config.retention_seconds,
            mirror_rows=config.mirror_rows,
            bus=bus,
        )
    if bus is not None:
        bus.start()
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
        for pipeline in pipelines.values():
            try:
                pipeline.bus_ready_if_idle()
                pipeline.snapshot_if_idle()
            except PySparkException:
                # The next micro-batch carries the snapshots instead; nothing is lost.
                log.exception("idle snapshots of %s failed", pipeline.dataset.name)
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
    if bus is not None:
        bus.stop()
    spark.stop()
    batch_log.close()
    return status


def _bus(config: PublisherSettings) -> BusConnector | None:
    """The database connector on the subject bus, for the datasets that opted in (None: none)."""
    if config.bus is None:
        return None
    tables = {
        dataset.name: ObjectTable(
            object_type(dataset), config.bus.domain, config.bus.fragment_bytes
        )
        for dataset in config.datasets.values()
        if dataset.bus is not None
    }
    return BusConnector(config.bus.url, config.bus.domain, tables) if tables else None
