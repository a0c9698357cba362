"""Which SQL views read the clock (``Sql.reads_clock``): their rows change as time passes."""

from __future__ import annotations

from fanout.views.sql import parse as sql


def test_the_clock_is_read_from_the_query() -> None:
    assert sql("SELECT * FROM events WHERE ts > now() - INTERVAL 400 MILLISECOND").reads_clock
    assert sql("SELECT * FROM events WHERE CAST(ts AS DATE) = current_date").reads_clock
    assert sql("SELECT id, today() AS d FROM events").reads_clock
    assert not sql(
        "SELECT * FROM events WHERE ts > TIMESTAMPTZ '2026-01-01 00:00:00+00'"
    ).reads_clock
    assert sql("SELECT * FROM events WHERE ts > get_current_timestamp()").reads_clock
