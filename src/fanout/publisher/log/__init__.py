"""The publisher's batch log: the only durable copy of the stream.

Relays keep no persistent state (US 7,487,246, "Gapless delivery and durable subscriptions in a
content-based publish/subscribe system", claim 1: "eliminate a need for persistent storage of
messages at brokers operating in the intermediate broker mode"), so whatever a relay or an
``every``-mode subscriber must get again after a crash is replayed from here
(``docs/delivery.md``).

The interface and the rules every backend keeps are in ``log.base``; the backends share their
SQL (``log.sql``): SQLite is the default (one host, ``log.sqlite``), PostgreSQL the shared option
for several hosts (``log.postgres``); ``log.urls`` opens either by URL.
"""

from fanout.publisher.log.base import (
    BatchLog,
    Gap,
    LogEntry,
    LogGap,
    Retention,
    decode_rows,
    encode_rows,
    find_gaps,
)
from fanout.publisher.log.postgres import PostgresLog
from fanout.publisher.log.sqlite import SqliteLog
from fanout.publisher.log.urls import check_log_url, open_log

__all__ = [
    "BatchLog",
    "Gap",
    "LogEntry",
    "LogGap",
    "PostgresLog",
    "Retention",
    "SqliteLog",
    "check_log_url",
    "decode_rows",
    "encode_rows",
    "find_gaps",
    "open_log",
]
