"""The class archive of Spark's JVM that the suite's JVMs map (``fanout.testing.jvmarchive``,
made by ``make test``): the session's own JVM maps it. (That a JVM which cannot use it says nothing
of it is seen by test_monitoring's check of a publisher's log lines.)"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from fanout.testing.jvmarchive import SUITE_ARCHIVE, options


def test_the_options_map_the_archive_and_silence_the_jvms_notes_on_it() -> None:
    assert options(Path("/x/a.jsa")).split() == [
        "-XX:SharedArchiveFile=/x/a.jsa",
        "-Xlog:cds=off",
        "-Xlog:cds+dynamic=off",
    ]


def test_the_sessions_jvm_maps_the_archive_make_test_made(spark: Any) -> None:
    archive = _made()
    if options(archive) not in os.environ["JDK_JAVA_OPTIONS"]:  # not tests/conftest.py's value
        assert not os.environ.get("FANOUT_CI"), os.environ["JDK_JAVA_OPTIONS"]  # CI sets none
        pytest.skip("JDK_JAVA_OPTIONS was set before the tests ran: the tests keep a user's own")
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    mapped = Path(f"/proc/{pid}/maps").read_text()
    assert str(archive.resolve()) in mapped  # a JVM that cannot use it unmaps it


def _made() -> Path:
    """The archive ``make test`` made (a failure on CI without it, else a skip)."""
    if not SUITE_ARCHIVE.is_file():
        if os.environ.get("FANOUT_CI"):
            pytest.fail(f"make test makes {SUITE_ARCHIVE} before the tests run")
        pytest.skip(f"no {SUITE_ARCHIVE}: make test makes it")
    return SUITE_ARCHIVE
