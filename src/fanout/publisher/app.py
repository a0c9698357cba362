"""Running a publisher: Spark session, pipeline, control plane, until stopped."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from functools import partial
from ssl import SSLContext
from types import FrameType

from prometheus_client.registry import Collector
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from fanout import allocator, metrics, tls
from fanout.errors import ConfigError
from fanout.publisher.busconnector import BusConnector
from fanout.publisher.bustable import ObjectTable, object_type
from fanout.publisher.config import PublisherSettings
from fanout.publisher.control import ControlPlane
from fanout.publisher.datasets import PostgresSource
from fanout.publisher.listener import stop_listening
from fanout.publisher.log import open_log
from fanout.publisher.pipeline import Pipeline
from fanout.publisher.relaytable import Registry
from fanout.publisher.service import DatasetService
from fanout.publisher.sources.postgres_reader import ReaderOptions
from fanout.publisher.sources.postgres_tail import LiveTail, source_schema
from fanout.publisher.spark import spark_session
from fanout.wire.messages import DatasetState

log = logging.getLogger(__name__)


def run(config: PublisherSettings) -> int:
    """Run until SIGINT/SIGTERM, restarting failed streaming queries; returns an exit status.

    Prints ``fanout publisher ready ws://HOST:PORT`` on stdout once relays can connect.
    """
    ssl = _ssl(config)
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
        collectors=[*_driver_jvm(spark), allocator.TrimCollector()],
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
    for pipeline in pipelines.values():
        pipeline.start(config.trigger)
    tails = _live_tails(config, bus)
    scheme = "ws" if ssl is None else "wss"
    print(f"fanout publisher ready {scheme}://{config.host}:{port}", flush=True)
    stopping = threading.Event()

    def stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    trimmed = time.monotonic()
    while not stopping.wait(1.0):
        if config.trim_every and time.monotonic() - trimmed >= config.trim_every:
            allocator.trim()  # glibc's free pages back (issue 45, item 5)
            trimmed = time.monotonic()
        for pipeline in pipelines.values():
            try:
                pipeline.bus_ready_if_idle()
                pipeline.snapshot_if_idle()
            except PySparkException:
                # The next micro-batch carries the snapshots instead; nothing is lost.
                log.exception("idle snapshots of %s failed", pipeline.dataset.name)
            supervise(pipeline, control, config.trigger, time.monotonic())
    began = time.monotonic()
    _stop_between_micro_batches(list(pipelines.values()))
    log.info("streaming queries stopped in %.1f s", time.monotonic() - began)
    for pipeline in pipelines.values():
        pipeline.stop_listening()
    control.stop()
    for tail in tails:
        tail.stop()
    if bus is not None:
        bus.stop()
    stop_listening(spark)  # after the control plane, whose /metrics would register it again
    spark.stop()
    log.info("stopped in %.1f s", time.monotonic() - began)
    batch_log.close()
    return 0


def _ssl(config: PublisherSettings) -> SSLContext | None:
    """The control plane's TLS context, or None without ``tls_cert`` and ``tls_key``."""
    if config.tls_cert is None and config.tls_key is None:
        return None
    if config.tls_cert is None or config.tls_key is None:
        raise ConfigError("TLS needs both a certificate and its key (tls_cert, tls_key)")
    return tls.server_context(config.tls_cert, config.tls_key)


#: Characters of a failed query's exception told to relays (Spark's carry a Java stack trace).
REASON_CHARS = 300


def supervise(pipeline: Pipeline, control: ControlPlane, trigger: float, now: float) -> None:
    """Restart a dataset's failed streaming query from its checkpoint once its backoff is over
    (``publisher.supervisor``); relays are told when it stops and when it runs again, and
    stay connected. The control plane and the other datasets go on meanwhile."""
    name, restarts, query = pipeline.dataset.name, pipeline.restarts, pipeline.query
    if restarts.due is None:
        if query is None or query.isActive:
            return
        error = query.exception()
        reason = summary(str(error)) if error is not None else "stopped"
        wait = restarts.failed(now, reason)
        log.error("dataset %s: streaming query failed: %s", name, error or "stopped")
        print(
            f"fanout publisher: streaming query {query.name} failed: {reason};"
            f" restarting in {wait:g} s",
            file=sys.stderr,
            flush=True,
        )
        control.announce(DatasetState(name, running=False, reason=reason, retry_in=wait))
    elif restarts.is_due(now):
        try:
            pipeline.restart(trigger)
        except PySparkException as exc:  # Spark could not start it: another failure
            reason = summary(str(exc))
            wait = restarts.failed(now, reason)
            log.error("dataset %s: restart failed: %s; again in %g s", name, reason, wait)
            control.announce(DatasetState(name, running=False, reason=reason, retry_in=wait))
            return
        restarts.restarted(now)
        log.warning("dataset %s: streaming query restarted (%d so far)", name, restarts.total)
        control.announce(DatasetState(name, running=True))


def summary(text: str) -> str:
    """One line of a failed query's exception for relays and stderr: Spark wraps the cause
    (``Caused by: ...``) in py4j's and its own messages, so the first cause is the line that
    says what happened; else the first line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    causes = [line.removeprefix("Caused by: ") for line in lines if line.startswith("Caused by:")]
    line = causes[0] if causes else (lines[0] if lines else "no message")
    return line[:REASON_CHARS]


def _driver_jvm(spark: SparkSession) -> list[Collector]:
    """The Spark driver JVM's ``process_*`` figures, as ``fanout_publisher_jvm_process_*``: the
    publisher's memory and CPU are mostly there (a child process when Spark runs in it, the
    parent under spark-submit), not in Python's own (``metrics.PROCESS``)."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: the driver is the server's, elsewhere
        return []
    pid = int(jvm.java.lang.ProcessHandle.current().pid())
    return [metrics.process_of(pid, "fanout_publisher_jvm")]


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


def _live_tails(config: PublisherSettings, bus: BusConnector | None) -> list[LiveTail]:
    """A live tail (``sources.postgres_tail``) of each database table whose dataset is on the
    bus, publishing its commits at once; started (once the captures are installed)."""
    tails = []
    for dataset in config.datasets.values():
        source = dataset.source
        if bus is None or dataset.bus is None or not isinstance(source, PostgresSource):
            continue
        table = source.table or dataset.name
        options = ReaderOptions(source.url, table, dataset.spark_schema(), key=dataset.key)
        tail = LiveTail(options, source_schema(options), partial(bus.publish_written, dataset.name))
        tail.start()
        tails.append(tail)
    return tails


#: Seconds a stopping publisher waits for a micro-batch in flight to end before it cuts it off.
STOP_WAIT = 10.0


def _stop_between_micro_batches(pipelines: list[Pipeline]) -> None:
    """Stop each query once its micro-batch in flight, if any, is delivered, within ``STOP_WAIT``
    seconds for all of them together. A loaded publisher starts each micro-batch as the last one
    ends, with no pause between them to wait for: the next one, just begun, is cancelled (and
    redone on restart: its offsets are not committed). Spark's cancelled job reaches our
    micro-batch code as an exception, which py4j would log with its traceback; that is expected
    at a stop, so py4j's log is quiet from here on."""
    logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
    deadline = time.monotonic() + STOP_WAIT
    running = [(p, p.query, p.delivered) for p in pipelines if p.query is not None]
    for pipeline, query, delivered in running:
        waited = time.monotonic()
        while (
            query.isActive
            and query.status["isTriggerActive"]
            and pipeline.delivered == delivered
            and time.monotonic() < deadline
        ):
            time.sleep(0.01)
        log.info("%s: stopping after %.2f s", pipeline.dataset.name, time.monotonic() - waited)
        query.stop()
