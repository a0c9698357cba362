"""A real publisher's Spark session, read back from the Spark UI it prints: what Spark was given
before fanout asked for a session (here ``PYSPARK_SUBMIT_ARGS``, which pyspark hands to
spark-submit as its ``--conf``) survives, fanout.toml's ``[spark]`` goes over fanout's defaults,
and those defaults fill the rest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from fanout.testing.machine import rss, tree

pytestmark = [pytest.mark.integration, pytest.mark.second_lane]

CONFIG = """
[spark]
ui = true  # embedded (local), where it is off by default
[spark.conf]
"spark.ui.port" = 0
"spark.sql.shuffle.partitions" = 3
"spark.sql.adaptive.enabled" = true
"spark.driver.extraJavaOptions" = "-XX:MaxMetaspaceSize=300m"
"""
#: spark-submit's own --conf: it must win over fanout.toml's 3 and fanout's 1 (one core).
SUBMIT_ARGS = "--conf spark.sql.shuffle.partitions=5 pyspark-shell"


def printed_until_ready(process: subprocess.Popen[str]) -> list[str]:
    """The publisher's standard output up to its ready line (pytest-timeout ends a wait for a
    publisher that never gets there)."""
    assert process.stdout is not None
    printed = []
    for line in process.stdout:
        printed.append(line)
        if line.startswith("fanout publisher ready "):
            return printed
    raise AssertionError(f"the publisher exited: {printed}")


def spark_application(ui: str) -> tuple[dict[str, str], int]:
    """The Spark settings and the driver's storage memory (bytes) of the one application behind
    a Spark UI, from Spark's REST API."""
    (application,) = httpx.get(f"{ui}/api/v1/applications", timeout=30).json()
    url = f"{ui}/api/v1/applications/{application['id']}"
    settings = dict(httpx.get(f"{url}/environment", timeout=30).json()["sparkProperties"])
    executors = httpx.get(f"{url}/executors", timeout=30).json()
    return settings, next(e["maxMemory"] for e in executors if e["id"] == "driver")


def test_spark_submits_conf_wins_and_the_ui_address_is_printed(tmp_path: Path) -> None:
    config = tmp_path / "fanout.toml"
    config.write_text(CONFIG)
    command = [sys.executable, "-m", "fanout", "publisher", "--config", str(config)]
    command += ["--port", "0", "--state-dir", str(tmp_path / "state"), "--master", "local[1]"]
    environment = os.environ | {"PYSPARK_SUBMIT_ARGS": SUBMIT_ARGS}
    environment.pop("SPARK_SUBMIT_OPTS", None)  # the suite's (tests/conftest.py): fanout's alone
    with (
        (tmp_path / "publisher.log").open("wb") as log,
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log, text=True, env=environment
        ) as process,
    ):
        try:
            printed = printed_until_ready(process)
            prefix = "fanout publisher Spark UI "
            (ui,) = [
                line.removeprefix(prefix).strip() for line in printed if line.startswith(prefix)
            ]
            spark, memory = spark_application(ui)
            (jvm,) = [
                p for p in tree(process.pid) if Path(f"/proc/{p}/comm").read_text() == "java\n"
            ]
            flags = Path(f"/proc/{jvm}/cmdline").read_bytes().decode().split("\0")
            resident = rss(jvm)
        finally:
            process.terminate()
    assert spark["spark.sql.shuffle.partitions"] == "5"  # spark-submit's --conf
    assert spark["spark.sql.adaptive.enabled"] == "true"  # fanout.toml's over fanout's
    assert spark["spark.sql.session.timeZone"] == "UTC"  # fanout's (and required)
    assert spark["spark.ui.showConsoleProgress"] == "false"  # fanout's over pyspark-shell's
    assert spark["spark.app.name"] == "fanout-publisher"
    # fanout's 4 GiB heap for an embedded driver (Spark's 1 GiB would leave about 0.4 GiB)
    assert memory > 1.5 * 2**30
    # fanout's bounds on its memory outside the heap, fanout.toml's own over them (the last wins)
    assert "-XX:MaxDirectMemorySize=512m" in flags
    # fanout's fixed heap: touched whole at the start, so the JVM is resident past it at once
    assert "-XX:+AlwaysPreTouch" in flags and "-XX:InitialRAMPercentage=100" in flags
    assert resident > 4 * 2**30
    assert [f for f in flags if f.startswith("-XX:MaxMetaspaceSize=")][-1].endswith("=300m")
