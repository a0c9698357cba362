"""A worker shows at once the writes its leader passes before the publisher answers
(``LivePath.pending``, relay/core/livepath.py), sans I/O: shown as a write made through it,
confirmed by its tick once logged, undone if refused, never shown twice, and nothing left
behind when the link to the leader is lost or an answer never comes."""

from __future__ import annotations

import numpy as np
from tests.relay.core.test_livepath import Talk, _rows, started

from fanout.relay.core.provisional import CONFIRM_WITHIN
from fanout.wire.columns import decode_columns, encode_columns
from fanout.wire.messages import Pending, Settled, Written


def pending(ref: int, upserts: dict[str, float], deletes: tuple[str, ...] = ()) -> Pending:
    """A write through another worker, passed by the leader under ``ref``."""
    keys = encode_columns({"topic": np.array(deletes, dtype=object)})
    return Pending(ref, "sensors", _rows(upserts), keys)


def unsettled(talk: Talk) -> float:
    return talk.live.stats()["live_unsettled"]


def test_a_pending_write_is_shown_at_once_and_confirmed_by_its_tick_once_logged() -> None:
    talk = started()
    (shown,) = talk.take(talk.live.pending(pending(7, {"a/1": 5.0, "a/2": 6.0}), talk.now))
    assert shown.sub == 1 and shown.provisional and not shown.full
    assert talk.views[1] == {"a/1": 5.0, "a/2": 6.0}
    assert talk.views[3] == talk.views[4] == {"a/1": 1.0}  # confirmed rows, the log's path
    assert unsettled(talk) == 1
    sends, written = talk.live.settled(Settled(7, 2, 3))
    assert sends == [] and len(talk.live.writes) == 1  # logged: its tick is yet to come
    assert written is not None and (written.first, written.last) == (2, 3)
    assert decode_columns(written.upserts)["topic"].tolist() == ["a/1", "a/2"]
    talk.batch(3, {"a/1": 5.0, "a/2": 6.0})
    talk.pushes.clear()
    talk.round()
    assert talk.views[1] == talk.views[3] == {"a/1": 5.0, "a/2": 6.0}
    assert all(not decode_columns(p.entered) for p in talk.pushes if p.sub == 1)
    counters = talk.live.writes.counters
    assert (counters.confirmed, counters.deduplicated, counters.corrected) == (1, 2, 0)
    assert (talk.live.passed, unsettled(talk), len(talk.live.writes)) == (1, 0, 0)


def test_a_pending_write_refused_is_undone_where_it_was_shown() -> None:
    talk = started()
    talk.take(talk.live.pending(pending(7, {"a/2": 6.0}, deletes=("a/1",)), talk.now))
    assert talk.views[1] == {"a/2": 6.0}
    sends, written = talk.live.settled(Settled(7))
    (undone,) = talk.take(sends)
    assert written is None and not undone.provisional
    assert talk.views[1] == {"a/1": 1.0}
    counters = talk.live.writes.counters
    assert (counters.refused, counters.corrected, unsettled(talk)) == (1, 2, 0)


def test_a_pending_write_settled_before_its_tick_came_is_confirmed_at_once() -> None:
    talk = started()
    talk.take(talk.live.pending(pending(7, {"a/1": 5.0}), talk.now))
    talk.batch(2, {"a/1": 5.0})  # the publisher's batch overtook its answer
    talk.round()
    sends, _ = talk.live.settled(Settled(7, 2, 2))
    assert talk.take(sends) == [] and talk.views[1] == {"a/1": 5.0}
    assert (talk.live.writes.counters.confirmed, len(talk.live.writes)) == (1, 0)


def test_a_pending_write_is_never_shown_twice_nor_counted_twice_with_a_later_written() -> None:
    """The leader sends no ``Written`` of a write it passed as ``Pending``; should one come (the
    same write, logged), it is taken for that write's answer, not shown as another."""
    talk = started()
    frame = pending(7, {"a/1": 5.0})
    talk.take(talk.live.pending(frame, talk.now))
    copy = Written("sensors", 2, 2, frame.upserts, frame.deletes)
    assert talk.live.from_elsewhere(copy, talk.now) == []
    sends, _ = talk.live.settled(Settled(7, 2, 2))
    assert sends == []
    talk.batch(2, {"a/1": 5.0})
    talk.round()
    assert talk.views[1] == talk.views[3] == {"a/1": 5.0}
    counters = talk.live.writes.counters
    assert (talk.live.passed, counters.writes, counters.confirmed) == (1, 1, 1)
    assert (len(talk.live.writes), unsettled(talk)) == (0, 0)


def test_losing_the_leader_withdraws_the_pending_writes_and_forgets_them() -> None:
    talk = started()
    talk.take(talk.live.pending(pending(7, {"a/2": 6.0}), talk.now))
    talk.take(talk.live.pending(pending(8, {"b/2": 3.0}), talk.now))
    assert talk.views[1] == {"a/1": 1.0, "a/2": 6.0} and talk.views[2] == {"b/1": 2.0, "b/2": 3.0}
    talk.take(talk.live.lost())
    assert talk.views[1] == {"a/1": 1.0} and talk.views[2] == {"b/1": 2.0}
    assert (len(talk.live.writes), unsettled(talk)) == (0, 0)
    assert talk.live.settled(Settled(7, 2, 2)) == ([], None)  # the old link's: nothing to do
    # Its copy logged and passed after reconnecting is a write made elsewhere, shown again.
    talk.live.back()
    copy = Written("sensors", 2, 2, _rows({"a/2": 6.0}), encode_columns({}))
    assert talk.take(talk.live.from_elsewhere(copy, talk.now))
    assert talk.views[1] == {"a/1": 1.0, "a/2": 6.0}


def test_a_pending_write_never_settled_is_withdrawn_and_forgotten_at_its_deadline() -> None:
    talk = started()
    talk.take(talk.live.pending(pending(7, {"a/9": 5.0}), talk.now))
    talk.take(talk.live.pending(pending(8, {"c/1": 1.0}), talk.now))  # in no view here
    assert talk.take(talk.live.expire(talk.now + 1.0)) == [] and unsettled(talk) == 2
    talk.take(talk.live.expire(talk.now + CONFIRM_WITHIN + 1.0))
    assert talk.views[1] == {"a/1": 1.0}
    assert (talk.live.writes.counters.withdrawn, unsettled(talk)) == (2, 0)
    assert talk.live.settled(Settled(7, 2, 2)) == ([], None)


def test_pending_writes_wait_at_most_as_many_as_may_be_pending() -> None:
    talk = started()
    talk.live.writes.limit = 2
    for ref, name in ((1, "a/2"), (2, "a/3"), (3, "a/4")):
        talk.take(talk.live.pending(pending(ref, {name: 1.0}), talk.now))
    assert talk.views[1] == {"a/1": 1.0, "a/2": 1.0, "a/3": 1.0}  # the third: its batch's
    assert (unsettled(talk), talk.live.writes.counters.skipped) == (2, 1)
    assert talk.live.settled(Settled(3, 4, 4)) == ([], None)


def test_a_pending_write_of_a_dataset_no_view_here_watches_is_passed_below_once_logged() -> None:
    """A worker's relays below get the write once logged (``Written``), as they did when the
    leader sent the worker ``Written``; it is shown to no one here, and forgotten once settled."""
    talk = Talk()
    talk.subscribe(1, "a/#", mode="every")  # takes no live writes
    talk.batch(1, {"a/1": 1.0})
    talk.round()
    frame = pending(7, {"a/2": 1.0})
    assert talk.live.pending(frame, talk.now) == [] and unsettled(talk) == 1
    sends, written = talk.live.settled(Settled(7, 5, 6))
    assert sends == [] and written == Written("sensors", 5, 6, frame.upserts, frame.deletes)
    assert (talk.live.passed, len(talk.live.writes), unsettled(talk)) == (0, 0, 0)
