"""The session's count of refused source rows (``sources.refusals``): one a session listener,
heard from first use until the publisher's stop unregisters that listener."""

from __future__ import annotations

from typing import Any

from fanout.publisher.listener import listener, stop_listening
from fanout.publisher.sources.refusals import refusals


def _listeners(spark: Any) -> list[Any]:
    """The listeners of the session's JVM stream manager (Spark's own list)."""
    return list(spark._jsparkSession.streams().listListeners())


def test_the_count_is_the_session_listeners_and_anew_after_its_stop(spark: Any) -> None:
    spark = spark.newSession()  # its own stream manager: the shared session's listener stays
    before = len(_listeners(spark))
    first = refusals(spark)
    assert refusals(spark) is first
    assert len(_listeners(spark)) == before + 1
    assert refusals(spark) is first and listener(spark) is listener(spark)
    stop_listening(spark)
    assert len(_listeners(spark)) == before
    again = refusals(spark)  # used again (a new session's queries): a count anew
    assert again is not first and len(_listeners(spark)) == before + 1
    stop_listening(spark)
