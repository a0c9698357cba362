"""The Spark session the publisher runs on, and its settings.

Who wins, highest first: what Spark was given before fanout asks for a session (``spark-submit
--conf``, ``PYSPARK_SUBMIT_ARGS``, ``spark-defaults.conf``), then ``fanout.toml``'s ``[spark]``,
then fanout's defaults for the master (embedded ``local[N]`` or a cluster). The session's time zone
is not a default but a requirement (UTC, as the relays'). docs/configuration.md, "Spark settings".
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from fanout.errors import ConfigError
from fanout.publisher.sources.simulation import SimulationDataSource

#: Settings fanout needs whoever else sets them. The session's time zone is UTC, the relay's
#: (``relay.data.tables``): a view's timestamp bounds, written without a zone, then select the same
#: instants at the publisher as at the relay, whatever zone the machines are set to.
REQUIRED = {"spark.sql.session.timeZone": "UTC"}
#: fanout's defaults on a cluster, for keys nobody else sets. Adaptive query execution is off: the
#: plans a micro-batch runs (a broadcast join of a small table for reads of the state, state
#: partitions fixed by the checkpoint) leave it nothing to improve, and it re-plans between
#: stages. Measured, the change is within the 2-core reference machine's noise
#: (``bench/microbatch.py``, docs/benchmarks/microbatch.md: 770 ms worse to 480 ms better a
#: micro-batch across runs), so it is kept for what it avoids, not for a measured gain. The Spark
#: UI is on (``spark.ui.enabled``); embedded (``local[N]``) it is off, and there is one state
#: partition per core (:func:`session_settings`).
CLUSTER = REQUIRED | {
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.adaptive.enabled": "false",
}
#: The embedded driver's heap, measured by ``bench/pipeline.py`` with a million keys: Spark's
#: default 1 GiB heap cannot hold the HDFS-backed state store's copies of its map (about 0.3 GB
#: per version, two versions kept), and garbage collection showed in every task (50-160 ms); with
#: 4 GiB and one state partition per core, 10,000-row micro-batches took 1.7 s instead of 2.4 s.
#: RocksDB (with changelog checkpointing, a 256 MiB block cache) did small micro-batches faster
#: (1.0 s) but cost about 7 us per changed row against 3 us, so at 100,000 updates/s it fell
#: behind where the HDFS-backed store kept up. Given as ``SPARK_DRIVER_MEMORY``, the one place
#: below ``--driver-memory``, ``--conf spark.driver.memory`` and ``spark-defaults.conf``.
DRIVER_MEMORY = "4g"
#: The embedded driver's memory, fixed so that its resident memory stays flat: its heap is
#: committed whole at the start and touched once (``InitialRAMPercentage=100`` makes the initial
#: heap the maximum, whatever sets ``-Xmx``; ``AlwaysPreTouch``), and never given back
#: (``MaxHeapFreeRatio=100``). Left elastic, G1 grew its heap in steps under load and gave it back
#: late: the JVM's RSS rose 22.6 %/h over an hour after warm-up (docs/benchmarks/memory.md).
#: Outside the heap, metaspace and direct buffers are bounded (unbounded by default, metaspace
#: grows with the classes loaded and direct buffers up to ``-Xmx`` again; measured under
#: ``bench/memory.py``'s load, metaspace held 140 MiB and direct buffers 8). The ceiling:
#: ``-Xmx`` + these + the code cache (240 MiB) + about 0.4 GiB the JVM sizes itself (G1's tables,
#: threads, symbols; docs/configuration.md, "Spark settings"). Given before the user's own options
#: (``SPARK_SUBMIT_OPTS``, then ``spark.driver.defaultJavaOptions`` and
#: ``spark.driver.extraJavaOptions``), so that any of theirs naming the same flag wins.
JAVA_OPTIONS = (
    "-XX:InitialRAMPercentage=100 -XX:MaxHeapFreeRatio=100 -XX:+AlwaysPreTouch"
    " -XX:MaxMetaspaceSize=512m -XX:MaxDirectMemorySize=512m"
)
#: What spark-submit sets itself when pyspark starts the JVM as ``pyspark-shell``: not the
#: user's, so not kept over fanout's when fanout started the JVM (a user asking for exactly these
#: values through ``PYSPARK_SUBMIT_ARGS`` gets fanout's instead).
SHELL_DEFAULTS = {"spark.app.name": "pyspark-shell", "spark.ui.showConsoleProgress": "true"}


def local_cores(master: str) -> int | None:
    """The task slots of a ``local``, ``local[N]``, ``local[*]`` or ``local[N,F]`` master URL.

    Returns:
        The number of cores a local master runs tasks on, or None for any other master.
    """
    if master == "local":
        return 1
    found = re.fullmatch(r"local\[(\*|\d+)(?:,\s*\d+)?\]", master)
    if found is None:
        return None
    return (os.cpu_count() or 1) if found[1] == "*" else max(1, int(found[1]))


def java_options(given: str | None) -> str:
    """``SPARK_SUBMIT_OPTS`` for an embedded driver fanout starts: :data:`JAVA_OPTIONS`, then what
    the user gave (the JVM takes a flag's last value, so theirs wins); given again, unchanged."""
    if not given:
        return JAVA_OPTIONS
    return given if given.startswith(JAVA_OPTIONS) else f"{JAVA_OPTIONS} {given}"


def session_settings(
    master: str | None,
    preset: Mapping[str, str],
    configured: Mapping[str, str],
    ui: bool | None = None,
) -> dict[str, str]:
    """The settings fanout gives the session builder, none of them already set.

    Args:
        master: the master fanout was told (``--master``, ``[publisher] master``), or None.
        preset: what Spark holds before the session is built: ``spark-submit --conf``,
            ``PYSPARK_SUBMIT_ARGS``, ``spark-defaults.conf`` (and ``spark.master``).
        configured: ``fanout.toml``'s ``[spark] conf``.
        ui: ``fanout.toml``'s ``[spark] ui``; None: on with a cluster master, off embedded.

    Returns:
        ``configured`` over fanout's defaults for the master, without the keys ``preset`` sets.

    Raises:
        ConfigError: a preset or configured value contradicts :data:`REQUIRED`.
    """
    for key, value in REQUIRED.items():
        for source, settings in (("fanout.toml", configured), ("spark-submit --conf", preset)):
            if settings.get(key, value) != value:
                raise ConfigError(
                    f"{source} sets {key}={settings[key]}: the publisher needs {value}"
                    " (relays compare timestamps in UTC, docs/configuration.md)"
                )
    cores = local_cores(master or preset.get("spark.master", "local[*]"))
    defaults = CLUSTER | {"spark.sql.shuffle.partitions": str(cores)} if cores else CLUSTER
    shown = not cores if ui is None else ui
    wanted = defaults | {"spark.ui.enabled": str(shown).lower()} | dict(configured)
    return {key: value for key, value in wanted.items() if key not in preset}


def spark_session(
    master: str | None = None,
    app_name: str = "fanout-publisher",
    conf: Mapping[str, str] | None = None,
    ui: bool | None = None,
) -> SparkSession:
    """Create (or get) the Spark session the publisher runs on, settings as
    :func:`session_settings` says.

    ``master`` is only set when given: on a cluster, spark-submit's ``--master`` must win
    (``docs/deploy.md``). Python workers run this interpreter, or Python data sources cannot
    start. ``conf`` (``fanout.toml``'s) is given to Spark's JVM when fanout starts it, so that
    settings read at its start (``spark.jars.packages``, ``spark.driver.extraJavaOptions``) work.

    Raises:
        ConfigError: the settings contradict what the publisher needs (:data:`REQUIRED`).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master is None and "SPARK_HOME" not in os.environ and not os.environ.get("MASTER"):
        master = "local[*]"
    started = SparkContext._jvm is not None or "PYSPARK_GATEWAY_PORT" in os.environ
    if master and local_cores(master) and not started:
        os.environ.setdefault("SPARK_DRIVER_MEMORY", DRIVER_MEMORY)
        os.environ["SPARK_SUBMIT_OPTS"] = java_options(os.environ.get("SPARK_SUBMIT_OPTS"))
    preset = _preset(conf or {})
    builder = SparkSession.builder
    if not started:  # fanout started the JVM as pyspark-shell, whose defaults are not the user's
        preset = {k: v for k, v in preset.items() if SHELL_DEFAULTS.get(k) != v}
        builder = builder.appName(app_name)  # under spark-submit, its --name (or its script's)
    if master:
        builder = builder.master(master)
    for key, value in session_settings(master, preset, conf or {}, ui).items():
        builder = builder.config(key, value)
    # A checkpoint keeps the state store provider and the number of state partitions it was
    # created with (Spark restores them from its offset log), so these only shape new streams.
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(SimulationDataSource)
    return spark


def _preset(conf: Mapping[str, str]) -> dict[str, str]:
    """What Spark's JVM was given: start it (``fanout.toml``'s settings given to it as
    ``--conf``, before ``PYSPARK_SUBMIT_ARGS``' own), or join spark-submit's, and read it."""
    SparkContext._ensure_initialized(conf=SparkConf(loadDefaults=False).setAll(list(conf.items())))
    return dict(SparkConf().getAll())
