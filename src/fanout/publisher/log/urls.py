"""Opening a log by URL: ``sqlite:`` for a SQLite file, ``postgresql:`` for a PostgreSQL
database."""

from __future__ import annotations

import re
import sqlite3
from typing import Literal

from fanout.errors import ConfigError
from fanout.publisher.log.base import BatchLog
from fanout.publisher.log.postgres import PostgresLog
from fanout.publisher.log.sqlite import SqliteLog


def open_log(url: str) -> BatchLog:
    """Open the publisher log a URL names (see ``check_log_url`` for the forms).

    Returns:
        A ``SqliteLog`` or a ``PostgresLog``.

    Raises:
        ConfigError: the URL is not a log URL, or the log it names cannot be opened; the message
            names the URL, its password masked.
    """
    kind, target = _parse_log_url(url)
    try:
        if kind == "sqlite":
            return SqliteLog(target)
    except (sqlite3.Error, OSError) as exc:
        raise ConfigError(_masked(f"cannot open the publisher log {url}: {exc}", url)) from exc
    import psycopg  # noqa: PLC0415 (loaded only to open a PostgreSQL log: ``log.postgres``)

    try:
        return PostgresLog(target)
    except (OSError, psycopg.Error) as exc:
        raise ConfigError(_masked(f"cannot open the publisher log {url}: {exc}", url)) from exc


def check_log_url(url: str) -> None:
    """Check a log URL without opening it (for configuration files).

    Args:
        url: ``sqlite:///abs/path.db``, ``sqlite:relative/path.db`` (to the working directory)
            or ``postgresql://user@host:port/db`` (any libpq URL; ``postgres://`` too).

    Raises:
        ConfigError: anything else, naming the URL.
    """
    _parse_log_url(url)


def _parse_log_url(url: str) -> tuple[Literal["sqlite", "postgresql"], str]:
    """(backend, SQLite path or PostgreSQL DSN) of a log URL."""
    scheme, _, rest = url.partition(":")
    if scheme.lower() in ("postgresql", "postgres") and rest.startswith("//"):
        return "postgresql", url
    if scheme.lower() != "sqlite":
        usage = "use sqlite:///ABSOLUTE/PATH.db, sqlite:RELATIVE/PATH.db or postgresql://..."
        raise ConfigError(_masked(f"unsupported publisher log URL {url!r}: {usage}", url))
    if rest.startswith("///"):
        rest = rest[2:]
    elif rest.startswith("//"):
        raise ConfigError(
            f"publisher log URL {url!r} names a host; SQLite takes sqlite:///ABSOLUTE/PATH.db "
            "or sqlite:RELATIVE/PATH.db"
        )
    if rest in ("", ":memory:") or rest.endswith("/"):
        raise ConfigError(f"publisher log URL {url!r} names no file (the log must be durable)")
    return "sqlite", rest


def _masked(text: str, url: str) -> str:
    """``text`` with the password of ``url`` (wherever ``text`` quotes it) replaced by ``***``.

    Works when ``url`` does not parse, too: libpq's errors quote a malformed URL whole.
    """
    authority = re.split(r"[/?#]", url.partition("://")[2], maxsplit=1)[0]
    user, colon, password = authority.rpartition("@")[0].partition(":")
    if not (colon and password):
        return text
    return text.replace(f"{user}:{password}@", f"{user}:***@")
