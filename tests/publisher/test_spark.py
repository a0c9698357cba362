"""The publisher's Spark settings (``publisher.spark``): the master's cores, and which of
spark-submit's, fanout.toml's and fanout's own settings the session gets, also in a session
spark-submit started (a JVM of its own, no publisher: tests/integration/test_spark_settings.py
reads a real publisher's)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.errors import ConfigError
from fanout.publisher.spark import (
    CLUSTER,
    JAVA_OPTIONS,
    java_options,
    local_cores,
    session_settings,
)


@pytest.mark.parametrize(
    ("master", "cores"),
    [
        ("local", 1),
        ("local[3]", 3),
        ("local[0]", 1),
        ("local[2, 4]", 2),
        ("local[*]", os.cpu_count() or 1),
        ("spark://127.0.0.1:7077", None),
        ("yarn", None),
    ],
)
def test_a_local_master_runs_tasks_on_its_cores(master: str, cores: int | None) -> None:
    assert local_cores(master) == cores


def test_the_embedded_drivers_java_options_come_before_the_users() -> None:
    assert java_options(None) == java_options("") == JAVA_OPTIONS
    assert "-XX:MaxMetaspaceSize=" in JAVA_OPTIONS and "-XX:MaxDirectMemorySize=" in JAVA_OPTIONS
    mine = "-XX:MaxMetaspaceSize=1g -Dx=1"
    assert java_options(mine) == f"{JAVA_OPTIONS} {mine}"  # the JVM takes a flag's last value
    assert java_options(java_options(mine)) == java_options(mine)  # a second session's start


@pytest.mark.parametrize("maximum", ["256m", "1g"])
def test_the_embedded_drivers_heap_is_fixed_at_whatever_its_maximum(maximum: str) -> None:
    """Whoever sets ``-Xmx`` (fanout's 4 GiB, ``--driver-memory``), the heap starts at it, is
    touched at once and is never shrunk: the JVM's own reading of its flags, a real ``java``."""
    command = ["java", *JAVA_OPTIONS.split(), f"-Xmx{maximum}", "-XX:+PrintFlagsFinal", "-version"]
    printed = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    flags = dict(re.findall(r"^\s*\S+ (\w+)\s+= (\S+)", printed, re.MULTILINE))
    assert flags["InitialHeapSize"] == flags["MaxHeapSize"] == str(parse_size(maximum))
    assert flags["AlwaysPreTouch"] == "true" and flags["MaxHeapFreeRatio"] == "100"


def parse_size(size: str) -> int:
    """Bytes of a JVM size such as ``256m`` or ``1g``."""
    return int(size[:-1]) * {"m": 2**20, "g": 2**30}[size[-1]]


# -- who wins: spark-submit's --conf (preset), then fanout.toml's [spark] conf, then fanout's ---

LOCAL = {"spark.master": "local[*]"}  # what spark-submit presets when nothing names a master


def test_embedded_the_ui_is_off_and_state_partitions_are_the_cores() -> None:
    settings = session_settings("local[3]", LOCAL, {})
    assert settings["spark.ui.enabled"] == "false"
    assert settings["spark.sql.shuffle.partitions"] == "3"
    assert settings["spark.sql.session.timeZone"] == "UTC"
    assert settings["spark.sql.adaptive.enabled"] == "false"


@pytest.mark.parametrize(
    ("master", "preset"),
    [("spark://10.0.0.1:7077", LOCAL), (None, {"spark.master": "yarn"})],
)
def test_on_a_cluster_the_ui_is_on(master: str | None, preset: dict[str, str]) -> None:
    """A cluster named by fanout's --master, or by spark-submit's (preset)."""
    settings = session_settings(master, preset, {})
    assert settings["spark.ui.enabled"] == "true"
    assert settings["spark.sql.shuffle.partitions"] == "4"


def test_fanout_toml_turns_the_ui_on_or_off() -> None:
    assert session_settings("local[2]", LOCAL, {}, ui=True)["spark.ui.enabled"] == "true"
    assert session_settings("yarn", LOCAL, {}, ui=False)["spark.ui.enabled"] == "false"


def test_spark_submits_conf_wins_over_fanout_toml_and_fanouts_defaults() -> None:
    preset = LOCAL | {"spark.sql.shuffle.partitions": "64", "spark.ui.enabled": "true"}
    configured = {"spark.sql.shuffle.partitions": "8", "spark.sql.adaptive.enabled": "true"}
    settings = session_settings("local[2]", preset, configured)
    assert "spark.sql.shuffle.partitions" not in settings  # Spark keeps spark-submit's 64
    assert "spark.ui.enabled" not in settings
    assert settings["spark.sql.adaptive.enabled"] == "true"  # fanout.toml's over fanout's


def test_the_session_time_zone_must_stay_utc() -> None:
    assert "spark.sql.session.timeZone" not in session_settings(
        "local", LOCAL | {"spark.sql.session.timeZone": "UTC"}, {}
    )
    with pytest.raises(ConfigError, match=r"spark-submit --conf sets spark.sql.session.timeZone"):
        session_settings("local", LOCAL | {"spark.sql.session.timeZone": "Europe/Paris"}, {})
    with pytest.raises(ConfigError, match=r"fanout.toml sets spark.sql.session.timeZone=Asia"):
        session_settings("local", LOCAL, {"spark.sql.session.timeZone": "Asia/Tokyo"})


KEYS = st.sampled_from(
    ["spark.sql.shuffle.partitions", "spark.ui.enabled", "spark.executor.memory", "spark.x.y"]
)
VALUES = st.sampled_from(["1", "2", "true", "false"])


@given(
    preset=st.dictionaries(KEYS, VALUES),
    configured=st.dictionaries(KEYS, VALUES),
    master=st.sampled_from(["local", "local[2]", "spark://h:7077", "yarn"]),
    ui=st.sampled_from([None, True, False]),
)
def test_each_key_comes_from_the_first_source_that_sets_it(
    preset: dict[str, str], configured: dict[str, str], master: str, ui: bool | None
) -> None:
    """Against the rule written out key by key: preset, else fanout.toml, else fanout's."""
    settings = session_settings(master, preset, configured, ui)
    cores = local_cores(master)
    defaults = dict(CLUSTER)
    if cores:
        defaults["spark.sql.shuffle.partitions"] = str(cores)
    defaults["spark.ui.enabled"] = "true" if (ui if ui is not None else not cores) else "false"
    for key in {*preset, *configured, *defaults}:
        if key in preset:
            assert key not in settings  # Spark has it already: the builder must not touch it
        elif key in configured:
            assert settings[key] == configured[key]
        else:
            assert settings[key] == defaults[key]
    assert set(settings) <= {*configured, *defaults}


#: The sources spark-submit's Python imports fanout from.
SRC = Path(__file__).parents[2] / "src"
#: Run by spark-submit: the session fanout builds, its settings as JSON.
SUBMITTED = """
import json
from fanout.publisher.spark import spark_session

toml = {"spark.sql.shuffle.partitions": "3", "spark.sql.adaptive.enabled": "true"}
spark = spark_session(conf=toml)
conf = spark.sparkContext.getConf()
keys = ["spark.app.name", *toml, "spark.ui.enabled"]
print("settings", json.dumps({key: conf.get(key) for key in keys}))
spark.stop()
"""


def test_under_spark_submit_its_conf_and_name_win(tmp_path: Path) -> None:
    """The case Spark users know: spark-submit starts the JVM, then the publisher's Python."""
    script = tmp_path / "submitted.py"
    script.write_text(SUBMITTED)
    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    result = subprocess.run(
        [
            *(str(spark_submit), "--master", "local[1]", "--name", "mine"),
            *("--conf", "spark.sql.shuffle.partitions=9", str(script)),
        ],
        env=os.environ | {"PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("settings ")]
    assert json.loads(line.removeprefix("settings ")) == {
        "spark.app.name": "mine",  # spark-submit's --name
        "spark.sql.shuffle.partitions": "9",  # spark-submit's --conf over fanout.toml's 3
        "spark.sql.adaptive.enabled": "true",  # fanout.toml's over fanout's
        "spark.ui.enabled": "false",  # fanout's, embedded: spark-submit's master is local
    }
