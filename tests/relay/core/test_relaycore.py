"""Whole relay conversations, sans I/O: frames in, frames out (relay/core/relaycore.py):
subscribing, deltas, rates, coverage, unsubscribing, errors, catalogs and batches."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
from tests.relay.core.conversations import (
    CLIENT,
    INFO,
    batch,
    frames,
    keys,
    pushes,
    ready_relay,
    relay,
    rows,
    served,
    subscribe,
)

from fanout.errors import ProtocolError
from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import UPSTREAM
from fanout.relay.core.scheduler import BURST
from fanout.testing import batches as kit
from fanout.testing.relaycore import ready_core
from fanout.views import Box, Sphere
from fanout.views.topic import parse as topic
from fanout.wire.columns import decode_columns, encode_columns
from fanout.wire.messages import (
    Acquire,
    Batch,
    Catalog,
    DatasetInfo,
    Error,
    NoUpdate,
    Push,
    Release,
    Subscribe,
    Subscribed,
    Unsubscribe,
    Unsubscribed,
)


def test_subscribe_acquires_upstream_and_the_snapshot_makes_the_first_full_push() -> None:
    core = relay()
    sends = core.on_subscribe(CLIENT, Subscribe(1, "agents", Box((0, 0), (10, 10)), rate=1000.0))
    assert isinstance(sends[0].frame, Subscribed)
    (acquire,) = frames(sends, UPSTREAM)
    assert isinstance(acquire, Acquire)
    assert acquire.view == Box((-5, -5), (15, 15))
    assert pushes(core) == []  # nothing is servable before the snapshot
    core.on_batch(batch(0, rows(k1=(1, 1), k2=(12, 12), k3=(9, 9)), snapshots=[acquire.prim]))
    (push,) = pushes(core)
    assert isinstance(push, Push)
    assert push.full
    assert keys(push.entered) == [1, 3]  # k2 is held upstream (margin) but outside the view


def test_pushes_are_deltas_entered_updated_left() -> None:
    core = relay()
    (acquire,) = subscribe(core, Box((0, 0), (10, 10)))
    core.on_batch(batch(0, rows(k1=(1, 1), k2=(2, 2), k3=(3, 3)), snapshots=[acquire.prim]))
    pushes(core, now=1.0)
    core.on_batch(batch(1, rows(k1=(1.5, 1.5), k2=(13, 13), k4=(4, 4))))
    (push,) = pushes(core, now=2.0)
    assert isinstance(push, Push)
    assert not push.full
    assert keys(push.entered) == [4]
    assert keys(push.updated) == [1]
    assert keys(push.left) == [2]


def test_no_change_in_the_view_is_a_no_update() -> None:
    core = relay()
    (acquire,) = subscribe(core, Box((0, 0), (10, 10)))
    core.on_batch(batch(0, rows(k1=(1, 1)), snapshots=[acquire.prim]))
    pushes(core, now=1.0)
    core.on_batch(batch(1, rows(k9=(14, 14))))
    (frame,) = pushes(core, now=2.0)
    assert isinstance(frame, NoUpdate)
    assert (frame.seq, frame.tick) == (1, 10)
    assert pushes(core, now=3.0) == []  # nothing new: nothing at all


def test_the_rate_limits_pushes_and_next_wakeup_says_when() -> None:
    """Ticks faster than the rate, by the wall clock and by their own times alike."""
    core = relay()
    core.on_subscribe(CLIENT, Subscribe(1, "agents", Box((0, 0), (10, 10)), rate=2.0))
    core.on_batch(batch(0, rows(k1=(1, 1)), snapshots=[1], tick_time=10.0))
    assert len(pushes(core, now=10.0)) == 1
    for seq in range(1, int(BURST)):
        core.on_batch(batch(seq, rows(k1=(seq, seq)), tick_time=10.0 + seq / 100))
        assert len(pushes(core, now=10.0)) == 1  # the rate's bucket holds spare pushes
    core.on_batch(batch(int(BURST), rows(k1=(9, 9)), tick_time=10.3))
    assert pushes(core, now=10.3) == []
    # the bucket refills at 2 pushes/s from empty at 10.0
    assert core.next_wakeup(10.3) == pytest.approx(10.5)
    assert len(pushes(core, now=10.5)) == 1


def test_a_view_change_alone_waits_for_the_next_tick_when_the_rate_is_tight() -> None:
    core = relay()
    core.on_subscribe(CLIENT, Subscribe(1, "agents", Box((0, 0), (10, 10)), rate=10.0))
    core.on_batch(batch(0, rows(k1=(1, 1), k2=(3, 3)), snapshots=[1], tick_time=10.0))
    for tick in range(1, 4):  # quick ticks use up the bucket's spare pushes
        core.on_batch(batch(tick, rows(k1=(1, 1)), tick_time=10.0 + tick * 0.01))
        assert len(pushes(core, now=10.0 + tick * 0.01)) == 1
    core.on_subscribe(CLIENT, Subscribe(1, "agents", Box((2, 2), (10, 10)), rate=10.0))
    assert pushes(core, now=10.08) == []  # a push now would delay the next tick's
    core.on_batch(batch(4, rows(k1=(1, 1)), tick_time=10.13))
    (push,) = pushes(core, now=10.13)  # the tick's push carries the view change too
    assert isinstance(push, Push)
    assert (push.seq, keys(push.left)) == (4, [1])


def test_a_busy_connection_is_skipped_and_served_when_idle() -> None:
    core = relay()
    (acquire,) = subscribe(core, Box((0, 0), (10, 10)))
    core.on_batch(batch(0, rows(k1=(1, 1)), snapshots=[acquire.prim]))
    assert core.pushes(1.0, lambda client: False) == []
    core.on_batch(batch(1, rows(k1=(2, 2))))
    (send,) = core.pushes(2.0, lambda client: True)
    push = send.message()
    assert isinstance(push, Push)
    assert push.full  # coalesced: the skipped first push and the update arrive as one
    assert keys(push.entered) == [1]
    assert decode_columns(push.entered)["x"].tolist() == [2.0]


def test_a_second_subscriber_inside_held_coverage_costs_nothing_upstream() -> None:
    core = relay()
    (acquire,) = subscribe(core, Box((0, 0), (10, 10)))
    core.on_batch(batch(0, rows(k1=(1, 1), k2=(12, 12)), snapshots=[acquire.prim]))
    assert subscribe(core, Box((11, 11), (14, 14)), sub=2) == []
    sent = {f.sub: f for f in pushes(core)}
    assert keys(sent[2].entered) == [2]  # type: ignore[union-attr]


def test_a_view_change_pushes_a_delta_once_coverage_is_ready() -> None:
    core = relay()
    (first,) = subscribe(core, Box((0, 0), (10, 10)))
    core.on_batch(batch(0, rows(k1=(1, 1), k5=(51, 51)), snapshots=[first.prim]))
    pushes(core, now=1.0)
    (second,) = subscribe(core, Box((50, 50), (60, 60)))
    assert pushes(core, now=2.0) == []  # the new region's snapshot has not arrived
    core.on_batch(batch(1, rows(k5=(51, 51), k6=(55, 55)), snapshots=[second.prim]))
    (push,) = pushes(core, now=3.0)
    assert isinstance(push, Push)
    assert not push.full
    assert keys(push.entered) == [5, 6]
    assert keys(push.left) == [1]


def test_a_snapshot_replaces_what_was_held_inside_its_primitive() -> None:
    core = relay()
    (acquire,) = subscribe(core, Box((0, 0), (10, 10)))
    core.on_batch(batch(0, rows(k1=(1, 1), k2=(2, 2)), snapshots=[acquire.prim]))
    core.end_epoch()
    assert core.datasets["agents"].table.keys.tolist() == [1, 2]
    # k2 left while the relay was not subscribed: a fresh snapshot no longer has it
    core.on_upstream_connected()
    core.on_batch(batch(5, rows(k1=(1, 1)), snapshots=[acquire.prim]))
    core.end_epoch()
    assert core.datasets["agents"].table.keys.tolist() == [1]


def test_unsubscribe_releases_the_primitive_after_the_grace_period() -> None:
    core = relay(Policy(widen="margin", grace=5.0))
    (acquire,) = subscribe(core, Box((0, 0), (10, 10)))
    core.on_batch(batch(0, rows(k1=(1, 1)), snapshots=[acquire.prim]))
    (ack,) = core.on_unsubscribe(CLIENT, Unsubscribe(1))
    assert isinstance(ack.frame, Unsubscribed)
    assert core.housekeeping(100.0) == []
    (release,) = core.housekeeping(105.0)
    assert release.frame == Release(acquire.prim)
    core.end_epoch()
    assert len(core.datasets["agents"].table) == 0  # rows outside all primitives are pruned


def test_a_disconnected_client_loses_its_subscriptions() -> None:
    core = relay()
    subscribe(core, Box((0, 0), (10, 10)))
    core.on_disconnect(CLIENT)
    assert len(core.downstream) == 0


def test_a_replayed_batch_is_ignored_and_a_gap_resyncs() -> None:
    core = relay()
    (acquire,) = subscribe(core, Box((0, 0), (10, 10)))
    core.on_batch(batch(0, rows(k1=(1, 1)), snapshots=[acquire.prim]))
    assert core.on_batch(batch(0, rows(k1=(5, 5)))) == []
    core.end_epoch()
    assert core.datasets["agents"].table.column("x").tolist() == [1.0]
    sends = core.on_batch(batch(3, rows(k1=(2, 2))))
    assert [type(s.frame) for s in sends] == [Release, Acquire]


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (Subscribe(1, "nope", Box((0, 0), (1, 1))), "unknown dataset 'nope'"),
        (Subscribe(1, "agents", Box((0, 0, 0), (1, 1, 1))), "is 2-D; the view is 3-D"),
        (Subscribe(1, "agents", topic("a/b")), "takes region views"),
        (Subscribe(1, "agents", Box((0, 0), (1, 1)), rate=0.0), "rate 0.0 must be in"),
    ],
)
def test_bad_subscriptions_get_an_error_naming_the_problem(
    request_: Subscribe, message: str
) -> None:
    core = relay()
    (send,) = core.on_subscribe(CLIENT, request_)
    assert isinstance(send.frame, Error)
    assert send.frame.ref == 1
    assert message in send.frame.message
    assert len(core.downstream) == 0


def test_unsubscribing_an_unknown_subscription_is_an_error() -> None:
    (send,) = relay().on_unsubscribe(CLIENT, Unsubscribe(9))
    assert isinstance(send.frame, Error)
    assert send.frame.code == "unknown_subscription"


def test_batches_that_do_not_fit_the_catalog_are_protocol_errors() -> None:
    core = relay()
    with pytest.raises(ProtocolError, match="unknown dataset"):
        core.on_batch(kit.batch(0, dataset="other"))
    with pytest.raises(ProtocolError, match="upsert columns"):
        core.on_batch(batch(0, {"id": [1], "x": [1.0]}))
    with pytest.raises(ProtocolError, match="duplicate keys"):
        core.on_batch(batch(0, {"id": [1, 1], "x": [1.0, 2.0], "y": [0.0, 0.0]}))
    no_keys = msgspec.structs.replace(batch(0), deletes=encode_columns({"x": [1.0]}))
    with pytest.raises(ProtocolError, match=r"^batch 0 deletes: 1 rows without the key column"):
        core.on_batch(no_keys)


@pytest.mark.parametrize(
    ("columns", "index_columns", "message"),
    [
        ({"id": "<i8", "x": "zz", "y": "<f8"}, ["x", "y"], "column 'x' has dtype 'zz'"),
        ({"id": "<f8", "x": "<f8", "y": "<f8"}, ["x", "y"], "integers or strings"),
        ({"x": "<f8", "y": "<f8"}, ["x", "y"], "the key column 'id' is not one of"),
        ({"id": "<i8", "x": "str", "y": "<f8"}, ["x", "y"], "'x' is str, not a number"),
        ({"id": "<i8", "x": "<f8", "y": "<f8"}, ["x", "x"], "2 or 3 distinct columns"),
        ({"id": "<i8", "x": "<f8"}, ["x"], "2 or 3 distinct columns"),
        ({"id": "<i8", "x": "<f8", "y": "<f8"}, ["x", "q"], "'q' is not a column"),
    ],
)
def test_a_catalog_the_relay_cannot_hold_is_a_protocol_error(
    columns: dict[str, str], index_columns: list[str], message: str
) -> None:
    core = relay()
    good = DatasetInfo("new", "id", {"id": "<i8", "x": "<f4", "y": "<i4"}, "space", ["x", "y"])
    bad = DatasetInfo("other", "id", columns, "space", index_columns)
    changed = DatasetInfo("agents", "id", {"id": "<i8", "x": "<f8", "y": "<f8"}, "sql", ["x"])
    with pytest.raises(ProtocolError, match=message):
        core.on_catalog(Catalog([good, changed, bad]))
    assert set(core.datasets) == {"agents"}  # nothing of that catalog was learnt
    assert core.datasets["agents"].info == INFO
    core.on_catalog(Catalog([good, changed]))
    assert core.datasets["new"].info == good
    assert core.datasets["agents"].info == changed


def test_a_connection_holds_at_most_max_subscriptions() -> None:
    core = ready_core(INFO, max_subscriptions=2)
    subscribe(core, Box((0, 0), (10, 10)), sub=1)
    subscribe(core, Box((0, 0), (10, 10)), sub=2)
    (refused,) = core.on_subscribe(CLIENT, Subscribe(3, "agents", Box((0, 0), (1, 1))))
    assert isinstance(refused.frame, Error)
    assert (refused.frame.code, refused.frame.ref) == ("bad_request", 3)
    assert "holds 2 subscriptions, the most the relay allows" in refused.frame.message
    subscribe(core, Box((5, 5), (9, 9)), sub=2)  # a view change is no new subscription
    assert core.on_subscribe(2, Subscribe(1, "agents", Box((0, 0), (1, 1))))  # another client
    core.on_unsubscribe(CLIENT, Unsubscribe(1))
    subscribe(core, Box((0, 0), (1, 1)), sub=3)  # room again
    assert sorted(s.key for s in core.downstream) == [(CLIENT, 2), (CLIENT, 3), (2, 1)]


def test_a_refused_primitive_is_dropped() -> None:
    core = relay()
    (acquire,) = subscribe(core, Sphere((0, 0), 5))
    core.on_upstream_error(Error("invalid_view", "no", ref=acquire.prim))
    assert len(core.upstream) == 0


def test_the_subscriptions_a_refused_primitive_leaves_uncovered_end_with_its_error() -> None:
    core = relay()
    (refused,) = subscribe(core, Box((0, 0), (10, 10)), sub=1)
    (kept,) = subscribe(core, Box((100, 100), (110, 110)), sub=2)
    assert subscribe(core, Box((2, 2), (4, 4)), sub=3) == []  # covered by the first one
    refusal = Error("invalid_view", "no such area", ref=refused.prim)
    (send_1, send_3) = core.on_upstream_error(refusal)
    for send, sub in ((send_1, 1), (send_3, 3)):
        assert send.to == CLIENT and isinstance(send.frame, Error)
        assert (send.frame.code, send.frame.ref) == ("invalid_view", sub)
        assert "the publisher refused data this view needs: no such area" in send.frame.message
    assert [s.sub for s in core.downstream] == [2]
    core.on_batch(batch(0, rows(k7=(105.0, 105.0)), snapshots=[kept.prim]))
    (push,) = pushes(core)
    assert isinstance(push, Push) and (push.sub, keys(push.entered)) == (2, [7])


def test_a_new_epoch_counts_every_held_row_as_updated() -> None:
    core = relay()
    (acquire,) = subscribe(core, Box((0, 0), (10, 10)))
    core.on_batch(batch(7, rows(k1=(1, 1)), snapshots=[acquire.prim]))
    pushes(core, now=1.0)
    core.on_batch(batch(0, rows(k2=(2, 2)), epoch=2))
    (push,) = pushes(core, now=2.0)
    assert isinstance(push, Push)
    assert keys(push.updated) == [1]
    assert keys(push.entered) == [2]


def test_a_dataset_keyed_by_strings() -> None:
    info = DatasetInfo(
        "named", "name", {"name": "str", "x": "<f8", "y": "<f8"}, "space", ["x", "y"]
    )
    core = ready_core(info)
    (acquire,) = frames(
        core.on_subscribe(2, Subscribe(1, "named", Box((0, 0), (10, 10)))), UPSTREAM
    )
    upserts = {
        "name": np.array(["b", "a", "far"], dtype=object),
        "x": [1.0, 2.0, 50.0],
        "y": [1.0, 2.0, 50.0],
    }
    # Batch written out: the kit's ``batch`` sends integer keys, this dataset's are strings.
    core.on_batch(
        Batch("named", 1, 0, 0, 0.0, encode_columns(upserts), encode_columns({}), [acquire.prim])
    )  # type: ignore[attr-defined]
    ((_, first),) = served(core, 1.0)
    assert decode_columns(first.entered)["name"].tolist() == ["a", "b"]  # type: ignore[attr-defined]
    deletes = encode_columns({"name": np.array(["a"], dtype=object)})
    core.on_batch(Batch("named", 1, 1, 10, 0.0, encode_columns({}), deletes))
    ((_, second),) = served(core, 2.0)
    assert decode_columns(second.left)["name"].tolist() == ["a"]  # type: ignore[attr-defined]


def test_a_batch_written_off_the_loop_is_swapped_in_only_once_finished() -> None:
    core = ready_relay(k1=(1, 1))
    core.on_subscribe(2, Subscribe(1, "agents", Box((0, 0), (10, 10)), rate=1000.0))
    served(core, 1.0)
    intake = core.admit(batch(1, rows(k1=(2, 2))))
    assert intake is not None
    intake.write()  # what the shell's writer thread does
    assert core.next_wakeup(2.0) is None  # nothing to do until it is finished: no busy loop
    assert core.pushes(2.0, lambda client: True) == []  # the dataset is busy: no swap
    core.finish(intake)
    ((_, push),) = served(core, 3.0)
    assert push.seq == 1  # type: ignore[attr-defined]
    assert core.admit(batch(1, rows(k1=(5, 5)))) is None  # already applied


def test_a_3d_sphere_view_gets_the_rows_inside_the_ball() -> None:
    info = DatasetInfo(
        "agents", "id", {"id": "<i8", "x": "<f8", "y": "<f8", "z": "<f8"}, "space", ["x", "y", "z"]
    )
    core = ready_core(info)
    ball = Sphere((0, 0, 0), 10)
    sends = core.on_subscribe(CLIENT, Subscribe(1, "agents", ball, rate=1000.0))
    (acquire,) = frames(sends, UPSTREAM)
    assert isinstance(acquire, Acquire)

    def points(**at: tuple[float, float, float]) -> dict[str, list]:
        keys = [int(k[1:]) for k in at]
        return {"id": keys, **{c: [p[i] for p in at.values()] for i, c in enumerate("xyz")}}

    # k2 is inside the ball's bounding cube but outside the ball; k3 is outside in z only
    start = points(k1=(1, 2, 3), k2=(8, 8, 8), k3=(0, 0, 11), k4=(-5, 0, -5))
    core.on_batch(batch(0, start, snapshots=[acquire.prim]))
    (first,) = pushes(core, now=1.0)
    assert isinstance(first, Push) and first.full
    assert keys(first.entered) == [1, 4]
    core.on_batch(batch(1, points(k1=(1, 2, 9), k3=(0, 0, 9), k4=(-5, 0, -9))))
    (second,) = pushes(core, now=2.0)
    assert isinstance(second, Push)
    assert keys(second.entered) == [3]
    assert keys(second.updated) == [1]
    assert keys(second.left) == [4]  # |(-5, 0, -9)| > 10


def test_a_view_moving_out_of_coverage_every_tick_keeps_every_tick_on_time() -> None:
    """The view moves past what the relay holds before each tick; the new region's snapshot
    comes at the seq already held (as a relay below gets it from its upstream). It completes a
    change of view, which takes only a spare push (else it goes with the next tick, which
    carries it), and the ticks, a little early, go out at once. (Woken as by new state, each
    snapshot took a push of its own, and with the wall clock's bucket alone the ticks from the
    second on waited for the rate, and stayed locked behind it.)"""
    core = relay()
    sends = core.on_subscribe(CLIENT, Subscribe(1, "agents", Box((0, 0), (10, 10)), rate=10.0))
    (acquire,) = frames(sends, UPSTREAM)
    core.on_batch(batch(0, rows(k1=(1, 1)), snapshots=[acquire.prim], tick_time=10.0))
    assert len(pushes(core, now=10.0)) == 1
    own = 0  # completed views pushed on their own, not with a tick
    for tick in range(1, 9):
        x, at = 100.0 * tick, 10.0 + tick * 0.1
        moved = Box((x, x), (x + 10, x + 10))
        (acquire,) = frames(core.on_subscribe(CLIENT, Subscribe(1, "agents", moved)), UPSTREAM)
        pushes(core, now=at - 0.07)  # not covered yet: nothing to push
        snapshot = rows(**{f"k{tick + 1}": (x + 1, x + 1)})
        held = at - 0.1  # the seq held, ticked a tick ago
        core.on_batch(batch(tick - 1, snapshot, snapshots=[acquire.prim], tick_time=held))
        own += len(pushes(core, now=at - 0.05))  # the view's rows: only if the rate has room
        core.on_batch(batch(tick, rows(**{f"k{tick + 1}": (x + 2, x + 2)}), tick_time=at))
        got = pushes(core, now=at - 0.02)  # the tick came a little early
        assert [p.seq for p in got if isinstance(p, Push)] == [tick], f"tick {tick} waits"
        assert sorted(core.datasets["agents"].table.keys.tolist())[-1] == tick + 1
    assert own <= 1, f"{own} completed views took pushes of their own, not the one spare"
