"""The Spark session the publisher runs on, and its settings.

On a cluster, spark-submit's own ``--master`` and settings win; embedded (``local[N]``), the
publisher sizes the driver and the state partitions itself.
"""

from __future__ import annotations

import os
import re
import sys

from pyspark.sql import SparkSession

from fanout.publisher.sources.simulation import SimulationDataSource

#: Spark settings of a publisher on a cluster (spark-submit may add its own). The session's
#: time zone is UTC, the relay's (``relay.data.tables``): a view's timestamp bounds, written without
#: a zone, then select the same instants at the publisher as at the relay, whatever zone the
#: machines are set to. Adaptive query execution is off: the plans a micro-batch runs (a
#: broadcast join of a small table for reads of the state, state partitions fixed by the
#: checkpoint) leave it nothing to improve, and it re-plans between stages. Measured, the change
#: is within the 2-core reference machine's noise (``bench/microbatch.py``,
#: docs/benchmarks/microbatch.md: 770 ms worse to 480 ms better a micro-batch across runs), so
#: it is kept for what it avoids, not for a measured gain.
CLUSTER = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.adaptive.enabled": "false",
}
#: Spark settings of an embedded publisher (``local[N]``), measured by ``bench/pipeline.py`` with a
#: million keys: Spark's default 1 GiB heap cannot hold the HDFS-backed state store's copies of
#: its map (about 0.3 GB per version, two versions kept), and garbage collection showed in every
#: task (50-160 ms); with 4 GiB and one state partition per core, 10,000-row micro-batches took
#: 1.7 s instead of 2.4 s. RocksDB (with changelog checkpointing, a 256 MiB block cache) did small
#: micro-batches faster (1.0 s) but cost about 7 us per changed row against 3 us, so at 100,000
#: updates/s it fell behind where the HDFS-backed store kept up.
EMBEDDED = CLUSTER | {"spark.driver.memory": "4g"}


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


def spark_session(master: str | None = None, app_name: str = "fanout-publisher") -> SparkSession:
    """Create (or get) the Spark session the publisher runs on.

    ``master`` is only set when given: on a cluster, spark-submit's ``--master`` must win
    (``docs/deploy.md``). Python workers run this interpreter, or Python data sources cannot
    start.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is None and "SPARK_HOME" not in os.environ and not os.environ.get("MASTER"):
        master = "local[*]"
    if master:
        builder = builder.master(master)
    cores = local_cores(master) if master else None
    settings = EMBEDDED if cores else CLUSTER
    # A checkpoint keeps the state store provider and the number of state partitions it was
    # created with (Spark restores them from its offset log), so these only shape new streams.
    partitions = str(cores) if cores else settings["spark.sql.shuffle.partitions"]
    for key, value in (settings | {"spark.sql.shuffle.partitions": partitions}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(SimulationDataSource)
    return spark
