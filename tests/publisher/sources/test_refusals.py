"""The session's listener for refused source rows (``sources.refusals``): registered once on first
use, and unregistered at a publisher's stop so that ``spark.stop()`` does not wait on its events."""

from __future__ import annotations

from typing import Any

from fanout.publisher.sources.refusals import refusals, stop_refusals


def _listeners(spark: Any) -> list[Any]:
    """The listeners of the session's JVM stream manager (Spark's own list)."""
    return list(spark._jsparkSession.streams().listListeners())


def test_the_listener_is_registered_once_and_gone_after_stop(spark: Any) -> None:
    spark = spark.newSession()  # its own stream manager: the shared session's listener stays
    before = len(_listeners(spark))
    first = refusals(spark)
    assert refusals(spark) is first
    assert len(_listeners(spark)) == before + 1
    stop_refusals(spark)
    assert len(_listeners(spark)) == before
    stop_refusals(spark)  # a second stop: nothing left to remove
    assert len(_listeners(spark)) == before
    again = refusals(spark)  # used again (a new session's queries): a listener anew
    assert again is not first and len(_listeners(spark)) == before + 1
    stop_refusals(spark)
