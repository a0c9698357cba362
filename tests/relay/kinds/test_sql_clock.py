"""A SQL view reading the clock (``now()``, ``current_date``): its rows change as time passes
with its table unchanged, so the relay cuts it again at its rate, not only on a new state; mode
``every`` refuses it (a row aging out has no seq to be sent in)."""

from __future__ import annotations

import time

import numpy as np

from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import UPSTREAM
from fanout.testing.batches import batch
from fanout.testing.relaycore import ready_core
from fanout.views.sql import parse as sql
from fanout.wire.columns import decode_columns
from fanout.wire.messages import Acquire, DatasetInfo, Error, Push, Subscribe

EVENTS = DatasetInfo("events", "id", {"id": "<i8", "ts": "<M8[us]"}, "sql", ["id", "ts"])
RECENT = "SELECT * FROM events WHERE ts > now() - INTERVAL 400 MILLISECOND"
UPCOMING = "SELECT * FROM events WHERE ts > now()"
#: Seconds ahead of the clock the test's event is: time enough for the first push on a busy
#: machine (DuckDB's first query is slow), then the event is past and leaves the view.
AHEAD = 3.0


def test_a_row_that_ages_out_of_a_view_leaves_it_with_no_new_state() -> None:
    core = ready_core(EVENTS, policy=Policy(grace=0.0))
    sends = core.on_subscribe(1, Subscribe(1, "events", sql(UPCOMING), rate=20.0))
    acquire = next(s.message() for s in sends if s.to == UPSTREAM)
    assert isinstance(acquire, Acquire)
    due = time.time() + AHEAD
    rows = {"id": np.array([7], dtype=np.int64), "ts": np.array([int(due * 1e6)], "<M8[us]")}
    core.on_batch(batch(0, rows, dataset="events", tick=1, snapshots=[acquire.prim]))
    first = [s.message() for s in core.pushes(1.0, lambda client: True)]
    pushes = [frame for frame in first if isinstance(frame, Push)]
    assert len(pushes) == 1 and decode_columns(pushes[0].entered)["id"].tolist() == [7]
    time.sleep(max(0.0, due - time.time()) + 0.2)  # the event is past now; no batch comes
    later = [s.message() for s in core.pushes(2.0, lambda client: True)]
    pushes = [frame for frame in later if isinstance(frame, Push)]
    assert len(pushes) == 1, later
    assert decode_columns(pushes[0].left)["id"].tolist() == [7]


def test_mode_every_refuses_a_view_reading_the_clock() -> None:
    core = ready_core(EVENTS, policy=Policy(grace=0.0))
    request = Subscribe(1, "events", sql(RECENT), mode="every")
    errors = [s.message() for s in core.on_subscribe(1, request)]
    refusals = [frame for frame in errors if isinstance(frame, Error)]
    assert len(refusals) == 1 and refusals[0].code == "invalid_view", errors
    assert "reads the clock" in refusals[0].message
