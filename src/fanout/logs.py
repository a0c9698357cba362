"""Log lines for people or for machines: ``--log-format text`` (the default) or ``json``.

Every command logs through the standard library's ``logging`` on stderr. In JSON, each record is
one object on one line (newlines inside a message or a traceback are escaped), which log
shippers (Vector, Fluent Bit, Promtail, ``jq``) read without a parsing rule: ``time`` (UTC,
ISO 8601, milliseconds), ``level``, ``logger``, ``message``, ``exception`` (the traceback, when
there is one) and any field a call passed with ``extra=``; a command's last word (``failed``)
and a crash's traceback come out the same way, and so do the records of the JVM Spark starts
(``JVM_JSON``). docs/operations.md shows them.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

#: The formats ``--log-format`` takes.
FORMATS = ("text", "json")
#: The text format: what the commands have always written.
TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: Log4j 2's configuration writing the same fields, for the JVMs a JSON-logging process starts:
#: Spark's driver (and its executors, in local mode) reads it from ``LOG4J_CONFIGURATION_FILE``.
JVM_JSON = Path(__file__).with_name("log4j2-json.properties")

#: The attributes every ``LogRecord`` has; any other one came from ``extra=``.
_RECORD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module's docstring for its fields)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON; a value JSON cannot hold is written as its ``str``."""
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        for key, value in vars(record).items():
            if key not in _RECORD:
                # An extra field named like one of ours keeps its value under another name.
                entry[f"extra_{key}" if key in entry else key] = value
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure(level: str, form: str = "text") -> None:
    """Send the process's log records to stderr, at ``level`` and above, in ``form``.

    Args:
        level: ``debug``, ``info``, ``warning`` or ``error``.
        form: one of ``FORMATS``.

    Raises:
        ValueError: an unknown level or format.
    """
    if form not in FORMATS:
        raise ValueError(f"unknown log format {form!r} (one of: {', '.join(FORMATS)})")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if form == "json" else logging.Formatter(TEXT))
    logging.basicConfig(level=level.upper(), handlers=[handler])
    if form == "json":
        sys.excepthook = _crashed
        # Inherited by the JVM pyspark starts; a configuration the user names wins.
        os.environ.setdefault("LOG4J_CONFIGURATION_FILE", str(JVM_JSON))


def failed(command: str, message: str) -> None:
    """Say why ``fanout COMMAND`` failed, on stderr: the line ``fanout COMMAND: message``, or
    with JSON logs an ERROR record of ``fanout.cli`` with that message and ``command``."""
    line = f"fanout {command}: {message}"
    if _json():
        logging.getLogger("fanout.cli").error(line, extra={"command": command})
    else:
        print(line, file=sys.stderr)


def _json() -> bool:
    """Whether the process logs JSON (``configure``)."""
    return any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)


def _crashed(
    kind: type[BaseException], exc: BaseException, traceback: TracebackType | None
) -> None:
    """An exception nothing caught, as a CRITICAL record rather than a bare traceback."""
    logging.getLogger("fanout").critical("crashed", exc_info=(kind, exc, traceback))
