"""One listener a Spark session for its streaming queries' progress, each event read once, as
Spark's own JSON, and handed to whoever asked for it.

PySpark hands a Python ``StreamingQueryListener`` each event converted field by field over py4j
(some forty calls into the JVM, and each observed-metrics row pickled there and unpickled here),
once for every listener registered: the publisher had one a query (``progress.ProgressLog``)
and one for refused rows (``sources.refusals``), each hearing every query's events. Here the
session has one listener: it asks the JVM for the progress's JSON (one call), parses it with
PySpark's own ``StreamingQueryProgress.fromJson`` (what Spark Connect's listeners get), and
calls the handlers of that query's name and those of every query. Spark leaves a source's NaN
or infinite rate out of its JSON, which ``SourceProgress.fromJson`` reads without a default:
such a rate is NaN here; an event that still cannot be read is logged, never raised into py4j.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import weakref
from collections.abc import Callable
from typing import Any, ClassVar

from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import StreamingQueryProgress

log = logging.getLogger(__name__)

#: What a handler is called with: one micro-batch's progress of one query.
Handler = Callable[[StreamingQueryProgress], None]
#: A source's rates, left out of Spark's JSON when NaN or infinite (see the module docstring).
RATES = ("inputRowsPerSecond", "processedRowsPerSecond")


def parsed(text: str) -> StreamingQueryProgress:
    """One progress event's JSON (Spark's) as PySpark's object; a source's rate Spark left out
    is NaN.

    Raises:
        ValueError, KeyError: not a progress's JSON as PySpark reads it.
    """
    progress = json.loads(text)
    for source in progress.get("sources", ()):
        for rate in RATES:
            source.setdefault(rate, math.nan)
    return StreamingQueryProgress.fromJson(progress)


class SessionProgress:
    """The session's one listener (a py4j callback object for Spark's Python listener wrapper).

    Handlers are keyed: ``query`` names the query whose events they hear (None: every query's).
    An event no handler hears is not read at all; a handler that raises is logged and the others
    are still called.
    """

    def __init__(self) -> None:
        self._handlers: dict[tuple[str | None, str], Handler] = {}
        self._lock = threading.Lock()
        self.wrapper: Any = None  # the JVM's wrapper of this object, once registered

    def add(self, query: str | None, name: str, handler: Handler) -> None:
        """Call ``handler`` with each progress of ``query`` (None: of every query), in place of
        any handler added before under the same ``query`` and ``name``."""
        with self._lock:
            self._handlers[query, name] = handler

    def discard(self, query: str | None, name: str) -> None:
        """No longer call the handler added under ``query`` and ``name`` (if any)."""
        with self._lock:
            self._handlers.pop((query, name), None)

    def onQueryStarted(self, jevent: Any) -> None:  # noqa: N802 (the JVM interface's names)
        """Nothing to hear."""

    def onQueryProgress(self, jevent: Any) -> None:  # noqa: N802
        """One micro-batch's progress: read once, handed to every handler that hears it."""
        with self._lock:
            handlers = list(self._handlers.items())
        if not handlers:
            return
        try:
            progress = parsed(jevent.progress().json())
        except Exception:  # said here: raised, py4j would only hand it back to Spark's log
            log.exception("a streaming query's progress event could not be read; not heard")
            return
        for (query, name), handler in handlers:
            if query is None or query == progress.name:
                try:
                    handler(progress)
                except Exception:  # one handler's failure is its own; the rest still hear
                    log.exception("%s failed on a progress event of %s", name, progress.name)

    def onQueryIdle(self, jevent: Any) -> None:  # noqa: N802
        """Nothing to hear."""

    def onQueryTerminated(self, jevent: Any) -> None:  # noqa: N802
        """Nothing to hear."""

    class Java:
        implements: ClassVar[list[str]] = [
            "org.apache.spark.sql.streaming.PythonStreamingQueryListener"
        ]


_SESSIONS: weakref.WeakKeyDictionary[SparkSession, SessionProgress] = weakref.WeakKeyDictionary()
_SESSIONS_LOCK = threading.Lock()


def listener(spark: SparkSession) -> SessionProgress:
    """The session's :class:`SessionProgress`, registered with its stream manager on first use."""
    with _SESSIONS_LOCK:
        found = _SESSIONS.get(spark)
        if found is None:
            found = SessionProgress()
            gateway = spark.sparkContext._gateway
            jvm = spark.sparkContext._jvm
            assert gateway is not None and jvm is not None
            ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
            wrapper = jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper(found)
            spark._jsparkSession.streams().addListener(wrapper)
            found.wrapper = wrapper
            _SESSIONS[spark] = found
        return found


def stop_listening(spark: SparkSession) -> None:
    """Unregister the session's listener, if it has one (a publisher's stop): queued behind
    busy micro-batches, its events would hold ``spark.stop()`` until each was called."""
    with _SESSIONS_LOCK:
        found = _SESSIONS.pop(spark, None)
    if found is not None:
        spark._jsparkSession.streams().removeListener(found.wrapper)
