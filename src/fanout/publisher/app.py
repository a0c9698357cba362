"""Running a publisher: Spark session, pipeline, control plane, until stopped."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from types import FrameType

from pyspark.errors import PySparkException
from pyspark.sql.streaming.query import StreamingQuery

from fanout import tls
from fanout.errors import ConfigError
from fanout.publisher.busconnector import BusConnector
from fanout.publisher.bustable import ObjectTable, object_type
from fanout.publisher.config import PublisherSettings
from fanout.publisher.control import ControlPlane
from fanout.publisher.log import open_log
from fanout.publisher.pipeline import Pipeline
from fanout.publisher.relaytable import Registry
from fanout.publisher.service import DatasetService
from fanout.publisher.spark import spark_session

log = logging.getLogger(__name__)


def run(config: PublisherSettings) -> int:
    """Run until SIGINT/SIGTERM or until a streaming query fails; returns an exit status.

    Prints ``fanout publisher ready ws://HOST:PORT`` on stdout once relays can connect.
    """
    ssl = None
    if config.tls_cert is not None or config.tls_key is not None:
        if config.tls_cert is None or config.tls_key is None:
            raise ConfigError("TLS needs both a certificate and its key (tls_cert, tls_key)")
        ssl = tls.server_context(config.tls_cert, config.tls_key)
    spark = spark_session(config.master, conf=config.spark.conf, ui=config.spark.ui)
    if spark.sparkContext.uiWebUrl:  # None with the UI off
        print(f"fanout publisher Spark UI {spark.sparkContext.uiWebUrl}", flush=True)
    registry = Registry(config.max_primitives)
    pipelines: dict[str, Pipeline] = {}
    control = ControlPlane(
        DatasetService(pipelines),
        registry,
        auth=config.auth,
        ssl=ssl,
        not_ready=lambda: _not_ready(pipelines),
    )
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
    scheme = "ws" if ssl is None else "wss"
    print(f"fanout publisher ready {scheme}://{config.host}:{port}", flush=True)
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
    _stop_between_micro_batches(queries)
    control.stop()
    if bus is not None:
        bus.stop()
    spark.stop()
    batch_log.close()
    return status


def _not_ready(pipelines: dict[str, Pipeline]) -> str | None:
    """Why relays cannot be served yet (``GET /readyz``), or None: every dataset's streaming
    query runs and has reported progress at least once."""
    for name, pipeline in pipelines.items():
        why = pipeline.not_ready()
        if why is not None:
            return f"dataset {name!r}: {why}"
    return None


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


#: Seconds a stopping publisher waits for a micro-batch in flight to end before it cuts it off.
STOP_WAIT = 10.0


def _stop_between_micro_batches(queries: list[StreamingQuery]) -> None:
    """Stop each query between two micro-batches if one comes within ``STOP_WAIT`` seconds:
    one cut off in flight is cancelled (and redone on restart: its offsets are not committed),
    and Spark's cancelled job reaches our micro-batch code as an exception, which py4j would
    log with its traceback; that is expected at a stop, so py4j's log is quiet from here on."""
    logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
    for query in queries:
        deadline = time.monotonic() + STOP_WAIT
        while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
            time.sleep(0.01)
        query.stop()
