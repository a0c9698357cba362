"""Whole relay conversations, sans I/O: frames in, frames out (relay/core/relaycore.py)."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fanout.errors import ProtocolError
from fanout.relay.core.planner import Policy
from fanout.relay.core.relaycore import UPSTREAM, RelayCore, Send
from fanout.relay.core.scheduler import BURST
from fanout.relay.data.tables import TableStore
from fanout.views import Box, Sphere
from fanout.views.region import RegionUnion, Sector
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
    Transform,
    Unsubscribe,
    Unsubscribed,
)

INFO = DatasetInfo("agents", "id", {"id": "<i8", "x": "<f8", "y": "<f8"}, "space", ["x", "y"])
CLIENT = 1


def relay(policy: Policy | None = None) -> RelayCore:
    core = RelayCore(policy or Policy(widen="margin", grace=0.0), engine=TableStore())
    core.on_catalog(Catalog([INFO]))
    assert core.on_upstream_connected() == []
    return core


def rows(**points: tuple[float, float]) -> dict[str, list[float] | list[int]]:
    keys = [int(k[1:]) for k in points]
    return {"id": keys, "x": [p[0] for p in points.values()], "y": [p[1] for p in points.values()]}


def batch(
    seq: int,
    upserts: dict | None = None,
    deletes: list[int] | None = None,
    snapshots: list[int] | None = None,
    epoch: int = 1,
) -> Batch:
    return Batch(
        dataset="agents",
        epoch=epoch,
        seq=seq,
        tick=10 * seq,
        tick_time=float(seq),
        upserts=encode_columns(upserts) if upserts else encode_columns({}),
        deletes=encode_columns({"id": np.array(deletes or [], dtype=np.int64)}),
        snapshots=snapshots or [],
    )


def frames(sends: list[Send], to: int) -> list[object]:
    return [s.frame for s in sends if s.to == to]


def subscribe(core: RelayCore, view: object, sub: int = 1) -> list[Acquire]:
    sends = core.on_subscribe(CLIENT, Subscribe(sub, "agents", view, rate=1000.0))  # type: ignore[arg-type]
    acquires = frames(sends, UPSTREAM)
    assert all(isinstance(a, Acquire) for a in acquires)
    return acquires  # type: ignore[return-value]


def pushes(core: RelayCore, now: float = 100.0) -> list[Push | NoUpdate]:
    return [s.message() for s in core.pushes(now, lambda client: True)]  # type: ignore[misc]


def keys(columns: object) -> list[int]:
    decoded = decode_columns(columns)  # type: ignore[arg-type]
    return sorted(decoded["id"].tolist()) if "id" in decoded else []


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


@pytest.mark.parametrize("widen", ["tiles", "margin", "enclose", "exact", "fit"])
@pytest.mark.parametrize(
    "view",
    [
        Box((-1e308, -1e308), (1e308, 1e308)),  # everything, as far as floats go
        Box((-1.7e308, 0.0), (1.7e308, 1.0)),  # its extent overflows
        Box((0.0, 0.0), (1e300, 1e300)),
        Box((1e308, 1e308), (1e308, 1e308)),  # a point where no tile can be computed
    ],
)
def test_a_view_near_the_largest_floats_is_acquired_as_it_is_and_served(
    view: Box, widen: str
) -> None:
    policy = Policy(widen=widen, grace=0.0, overshoot=0.75 if widen == "enclose" else 0.0)
    core = relay(policy)
    acquires = subscribe(core, view)
    assert acquires
    core.on_batch(
        batch(
            0,
            rows(k1=(1.0, 0.5), k2=(1e308, 1e308), k3=(-5.0, -5.0)),
            snapshots=[a.prim for a in acquires],
        )
    )
    (push,) = pushes(core)
    assert isinstance(push, Push)
    inside = [
        k
        for k, (x, y) in {1: (1.0, 0.5), 2: (1e308, 1e308), 3: (-5.0, -5.0)}.items()
        if view.lo[0] <= x <= view.hi[0] and view.lo[1] <= y <= view.hi[1]
    ]
    assert keys(push.entered) == inside


ANY = st.floats(allow_nan=False, allow_infinity=False)
RADIUS = st.floats(0, 1.7e308)


@st.composite
def any_region(draw: st.DrawFn) -> object:
    """A region anywhere in the floats, of any size."""

    def one(kind: str) -> object:
        if kind == "box":
            xs, ys = sorted([draw(ANY), draw(ANY)]), sorted([draw(ANY), draw(ANY)])
            return Box((xs[0], ys[0]), (xs[1], ys[1]))
        centre = (draw(ANY), draw(ANY))
        if kind == "sphere":
            return Sphere(centre, draw(RADIUS))
        return Sector(centre, draw(RADIUS), draw(st.floats(-7, 7)), draw(st.floats(0.01, 3.14)))

    kind = draw(st.sampled_from(["box", "sphere", "sector", "union"]))
    if kind == "union":
        return RegionUnion([one(draw(st.sampled_from(["box", "sphere", "sector"]))) for _ in "ab"])
    return one(kind)


FOUND_RADIUS = 1591981113813695.0  # found by the property test below


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(any_region(), min_size=1, max_size=3), st.sampled_from(["tiles", "exact"]))
@example([Sphere((0.0, 0.0), 1.3407807929942597e154)], "exact")  # its square overflowed: raised
@example([Sphere((0.0, 8.988465674311579e307), 8.98846567431158e307)], "tiles")  # bounds: inf
@example([Box((-1.7e308, -1.7e308), (1.7e308, 1.7e308))], "tiles")  # cells never shrank
@example(  # the residual, once held, did not cover the union: never served
    [
        Box((0, 0), (0, 0)),
        RegionUnion((Sector((0, 0), FOUND_RADIUS, 6.25, 1.09375), Sphere((0, 0), FOUND_RADIUS))),
    ],
    "exact",
)
def test_regions_anywhere_in_the_floats_are_served_without_failing(views, widen) -> None:  # type: ignore[no-untyped-def]
    """Subscribing, taking a batch (rows near the largest floats too), pushing and housekeeping
    with views of any size anywhere: whatever the relay decides, nothing raises (a raise in the
    pump would stop it for every subscriber)."""
    core = relay(Policy(widen=widen, grace=0.0))
    prims = [a.prim for number, view in enumerate(views, 1) for a in subscribe(core, view, number)]
    points = rows(k1=(0.0, 0.0), k2=(1e308, 1e308), k3=(-1e308, -1e308), k4=(1.7e308, 5.0))
    core.on_batch(batch(0, points, snapshots=prims))
    served = {push.sub: push for push in pushes(core) if isinstance(push, Push)}
    assert sorted(served) == list(range(1, len(views) + 1))
    xs, ys = np.array(points["x"]), np.array(points["y"])
    for number, view in enumerate(views, 1):
        with np.errstate(over="ignore", invalid="ignore"):
            inside = np.array(points["id"])[view.match(xs, ys)]
        assert keys(served[number].entered) == sorted(inside.tolist())
    core.housekeeping(1000.0)


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
    core = relay()
    core.on_subscribe(CLIENT, Subscribe(1, "agents", Box((0, 0), (10, 10)), rate=2.0))
    core.on_batch(batch(0, rows(k1=(1, 1)), snapshots=[1]))
    assert len(pushes(core, now=10.0)) == 1
    for seq in range(1, int(BURST)):
        core.on_batch(batch(seq, rows(k1=(seq, seq))))
        assert len(pushes(core, now=10.0)) == 1  # the rate's bucket holds spare pushes
    core.on_batch(batch(int(BURST), rows(k1=(9, 9))))
    assert pushes(core, now=10.3) == []
    # the bucket refills at 2 pushes/s from empty at 10.0
    assert core.next_wakeup(10.3) == pytest.approx(10.5)
    assert len(pushes(core, now=10.5)) == 1


def test_a_view_change_alone_waits_for_the_next_tick_when_the_rate_is_tight() -> None:
    core = relay()
    core.on_subscribe(CLIENT, Subscribe(1, "agents", Box((0, 0), (10, 10)), rate=10.0))
    core.on_batch(batch(0, rows(k1=(1, 1), k2=(3, 3)), snapshots=[1]))
    for tick in range(1, 4):  # quick ticks use up the bucket's spare pushes
        core.on_batch(batch(tick, rows(k1=(1, 1))))
        assert len(pushes(core, now=10.0 + tick * 0.01)) == 1
    core.on_subscribe(CLIENT, Subscribe(1, "agents", Box((2, 2), (10, 10)), rate=10.0))
    assert pushes(core, now=10.08) == []  # a push now would delay the next tick's
    core.on_batch(batch(4, rows(k1=(1, 1))))
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
        core.on_batch(Batch("other", 1, 0, 0, 0.0, encode_columns({}), encode_columns({})))
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
    core = RelayCore(Policy(widen="margin", grace=0.0), max_subscriptions=2)
    core.on_catalog(Catalog([INFO]))
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


# -- transforms, capabilities, sharing, scheduling, double buffering ------------------------


def served(core: RelayCore, now: float, idle=lambda client: True) -> list[tuple[int, object]]:
    return [(s.to, s.message()) for s in core.pushes(now, idle)]


def ready_relay(view: object = Box((0, 0), (10, 10)), **points: tuple[float, float]) -> RelayCore:
    """A relay whose first subscription's coverage is ready, holding ``points``."""
    core = relay()
    (acquire,) = subscribe(core, view, sub=99)
    core.on_batch(batch(0, rows(**points), snapshots=[acquire.prim]))
    core.on_unsubscribe(CLIENT, Unsubscribe(99))
    return core


def test_a_projection_sends_only_the_columns_asked_for() -> None:
    core = ready_relay(k1=(1, 2))
    request = Subscribe(1, "agents", Box((0, 0), (10, 10)), transform=Transform(columns=["y"]))
    (reply,) = core.on_subscribe(2, request)
    assert reply.frame == Subscribed(1, "id", ["id", "y"])
    ((_, push),) = served(core, 1.0)
    assert isinstance(push, Push)
    assert decode_columns(push.entered).keys() == {"id", "y"}


def test_an_unknown_column_is_refused_at_subscribe_time() -> None:
    core = relay()
    request = Subscribe(1, "agents", Box((0, 0), (1, 1)), transform=Transform(columns=["z"]))
    (send,) = core.on_subscribe(CLIENT, request)
    assert isinstance(send.frame, Error)
    assert (send.frame.code, send.frame.ref) == ("invalid_transform", 1)
    assert len(core.downstream) == 0


def test_a_subscriber_without_floating_point_gets_fixed_point() -> None:
    core = ready_relay(k1=(1.5, 2.25))
    core.on_connect(2, ["fixed"])
    core.on_subscribe(2, Subscribe(1, "agents", Box((0, 0), (10, 10))))
    ((_, push),) = served(core, 1.0)
    entered = decode_columns(push.entered)  # type: ignore[attr-defined]
    assert entered["x"].dtype == np.int64
    assert entered["x"].tolist() == [1.5 * 1024]
    assert entered["y"].tolist() == [2.25 * 1024]


def test_coordinates_relative_to_an_entity_follow_it() -> None:
    core = ready_relay(k1=(1, 1), k2=(5, 5))
    core.on_subscribe(
        2, Subscribe(1, "agents", Box((0, 0), (10, 10)), transform=Transform(relative_to=2))
    )
    ((_, first),) = served(core, 1.0)
    assert decode_columns(first.entered)["x"].tolist() == [-4.0, 0.0]  # type: ignore[attr-defined]
    core.on_batch(batch(1, rows(k2=(6, 5))))  # only the entity moves
    ((_, second),) = served(core, 2.0)
    assert keys(second.updated) == [1, 2]  # type: ignore[attr-defined]
    assert decode_columns(second.updated)["x"].tolist() == [-5.0, 0.0]  # type: ignore[attr-defined]


def test_an_entity_that_leaves_the_relay_ends_the_subscription_with_an_error() -> None:
    core = ready_relay(k1=(1, 1), k2=(5, 5))
    core.on_subscribe(
        2, Subscribe(1, "agents", Box((0, 0), (10, 10)), transform=Transform(relative_to=2))
    )
    served(core, 1.0)
    core.on_batch(batch(1, deletes=[2]))
    ((to, error),) = served(core, 2.0)
    assert isinstance(error, Error)
    assert (to, error.code, error.ref) == (2, "entity_not_held", 1)
    assert len(core.downstream) == 0
    assert core.stats()["ended_entity_not_held"] == 1


def test_identical_views_share_one_encoded_body() -> None:
    core = ready_relay(k1=(1, 1), k2=(2, 2))
    view = Box((0, 0), (10, 10))
    for client in (2, 3, 4):
        core.on_subscribe(client, Subscribe(1, "agents", view))
    core.on_subscribe(5, Subscribe(1, "agents", view, transform=Transform(precision="float32")))
    sends = core.pushes(1.0, lambda client: True)
    by_client = {s.to: s.frame for s in sends}
    assert by_client[2] == by_client[3] == by_client[4]  # the same bytes
    assert by_client[5] != by_client[2]
    stats = core.stats()
    assert (stats["bodies_cut"], stats["bodies_shared"]) == (2, 2)
    core.on_batch(batch(1, rows(k1=(3, 3))))
    core.pushes(2.0, lambda client: True)
    assert core.stats()["bodies_shared"] == 4  # still in step: shared again


def test_every_push_of_a_round_is_cut_from_one_state() -> None:
    core = ready_relay(k1=(1, 1))
    for client in (2, 3):
        core.on_subscribe(client, Subscribe(1, "agents", Box((0, 0), (10, 10))))
    round_ = core.serve(1.0, lambda client: True)
    first = next(round_).message()
    core.on_batch(batch(1, rows(k1=(2, 2))))  # arrives mid-round: into the inert buffer
    second = next(round_).message()
    assert isinstance(first, Push) and isinstance(second, Push)
    assert first.seq == second.seq == 0
    assert decode_columns(second.entered)["x"].tolist() == [1.0]
    assert [s.message().seq for s in core.pushes(2.0, lambda client: True)] == [1, 1]  # type: ignore[attr-defined]


def test_a_round_stopped_early_leaves_the_rest_for_the_next() -> None:
    core = ready_relay(k1=(1, 1))
    for client in range(2, 12):
        core.on_subscribe(client, Subscribe(1, "agents", Box((0, 0), (10, 10))))
    round_ = core.serve(1.0, lambda client: True)
    firsts = [next(round_).to for _ in range(3)]
    round_.close()  # the time budget ran out
    assert core.next_wakeup(1.0) == 1.0  # more is due right now
    rest = [s.to for s in core.pushes(1.0, lambda client: True)]
    assert sorted(firsts + rest) == list(range(2, 12))


def test_a_round_past_its_deadline_starts_no_more_pushes_and_keeps_their_order() -> None:
    core = ready_relay(k1=(1, 1))
    for client, priority in ((2, 0), (3, 2), (4, 1)):
        request = Subscribe(1, "agents", Sphere((5, 5), 5), rate=1000.0, priority=priority)
        core.on_subscribe(client, request)
    late = [s.to for s in core.serve(1.0, lambda client: True, lambda: True)]
    assert late == [3]  # past the deadline already: the first push only, then the round ends
    assert core.next_wakeup(1.0) == 1.0
    assert [s.to for s in core.pushes(1.0, lambda client: True)] == [4, 2]


def test_a_connection_gets_its_highest_priority_subscription_first() -> None:
    core = ready_relay(k1=(1, 1))
    for sub, priority in ((1, 0), (2, 5), (3, 1)):
        request = Subscribe(sub, "agents", Box((0, 0), (10, 10)), rate=1000.0, priority=priority)
        core.on_subscribe(2, request)
    order = []
    for step in range(3):
        # the connection takes one push, then is busy until it has written it
        (send,) = _one(core, 1.0 + step)
        order.append(send.message().sub)  # type: ignore[attr-defined]
        core.on_writable(2)
    assert order == [2, 3, 1]


def _one(core: RelayCore, now: float) -> list[Send]:
    busy = False

    def idle(client: int) -> bool:
        return not busy

    sends = []
    for send in core.serve(now, idle):
        sends.append(send)
        busy = True
    return sends


def test_a_busy_subscriber_gets_the_latest_state_when_it_can_take_it() -> None:
    core = ready_relay(k1=(1, 1))
    core.on_subscribe(2, Subscribe(1, "agents", Box((0, 0), (10, 10)), rate=1000.0))
    served(core, 1.0)
    for seq in range(1, 5):
        core.on_batch(batch(seq, rows(k1=(1 + seq, 1))))
        assert core.pushes(1.0 + seq, lambda client: False) == []  # still writing
    core.on_writable(2)
    ((_, push),) = served(core, 6.0)
    assert push.seq == 4  # type: ignore[attr-defined]
    assert decode_columns(push.updated)["x"].tolist() == [5.0]  # type: ignore[attr-defined]
    subscription = core.downstream.get((2, 1))
    assert subscription is not None
    assert subscription.coalesced == 3  # ticks 1-3 were folded into the push of tick 4
    assert subscription.deferred >= 1


def test_a_changed_transform_sends_everything_again() -> None:
    core = ready_relay(k1=(1, 1))
    core.on_subscribe(2, Subscribe(1, "agents", Box((0, 0), (10, 10))))
    served(core, 1.0)
    core.on_subscribe(
        2, Subscribe(1, "agents", Box((0, 0), (10, 10)), transform=Transform(precision="float32"))
    )
    ((_, push),) = served(core, 2.0)
    assert push.full  # type: ignore[attr-defined]
    assert decode_columns(push.entered)["x"].dtype == np.float32  # type: ignore[attr-defined]


def test_a_dataset_keyed_by_strings() -> None:
    info = DatasetInfo(
        "named", "name", {"name": "str", "x": "<f8", "y": "<f8"}, "space", ["x", "y"]
    )
    core = RelayCore(Policy(widen="margin", grace=0.0))
    core.on_catalog(Catalog([info]))
    (acquire,) = frames(
        core.on_subscribe(2, Subscribe(1, "named", Box((0, 0), (10, 10)))), UPSTREAM
    )
    upserts = {
        "name": np.array(["b", "a", "far"], dtype=object),
        "x": [1.0, 2.0, 50.0],
        "y": [1.0, 2.0, 50.0],
    }
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
    core = RelayCore(Policy(widen="margin", grace=0.0))
    core.on_catalog(Catalog([info]))
    core.on_upstream_connected()
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


@pytest.mark.parametrize("widen", ["tiles", "margin", "exact", "enclose", "fit"])
def test_every_widening_serves_a_second_view_beside_the_first(widen: str) -> None:
    core = relay(Policy(widen=widen, grace=0.0))  # type: ignore[arg-type]
    first = subscribe(core, Box((0, 0), (10, 10)), sub=1)
    truth = rows(k1=(5, 5), k2=(15, 5), k3=(40, 40))
    core.on_batch(batch(0, truth, snapshots=[a.prim for a in first]))
    pushes(core, now=1.0)
    second = subscribe(core, Box((8, 0), (18, 10)), sub=2)  # half covered by the first
    core.on_batch(batch(1, truth, snapshots=[a.prim for a in second]))
    served = {p.sub: p for p in pushes(core, now=2.0)}  # type: ignore[union-attr]
    assert keys(served[2].entered) == [2]  # type: ignore[union-attr]
    assert served[2].full  # type: ignore[union-attr]


def test_an_enclosure_overshoots_and_the_first_is_released_once_enclosed() -> None:
    core = relay(Policy(widen="enclose", margin=0.0, overshoot=1.0, grace=0.0))
    (first,) = subscribe(core, Box((0, 0), (10, 10)), sub=1)
    core.on_batch(batch(0, rows(k1=(5, 5), k2=(18, 5)), snapshots=[first.prim]))
    (grown,) = subscribe(core, Box((5, 0), (15, 10)), sub=2)
    assert grown.view == Box((0, 0), (20, 10))  # 5 beyond the first, pushed out 5 more
    assert subscribe(core, Box((12, 2), (19, 8)), sub=3) == []  # the overshoot already holds it
    core.on_batch(batch(1, rows(k1=(5, 5), k2=(18, 5)), snapshots=[grown.prim]))
    core.end_epoch()
    released = frames(core.housekeeping(now=50.0), UPSTREAM)
    assert [r.prim for r in released] == [first.prim]  # type: ignore[attr-defined]
    assert core.stats()["primitives_acquired"] == 2
    assert core.stats()["primitives"] == 1


def test_fit_refits_to_the_views_the_relay_serves_and_releases_what_it_replaced() -> None:
    """The relay hands ``fit`` the views it serves: the second view's primitive is fitted to
    both views, not to the first primitive's guess, which is released once the refit is
    ready."""
    core = relay(Policy(widen="fit", margin=0.5, grace=0.0))
    (first,) = subscribe(core, Box((0, 0), (10, 10)), sub=1)
    assert first.view == Box((-5, -5), (15, 15))  # alone: stretched by half its side
    core.on_batch(batch(0, rows(k1=(5, 5), k2=(20, 5)), snapshots=[first.prim]))
    (refit,) = subscribe(core, Box((12, 0), (22, 10)), sub=2)
    # both views span x 0..22, y 0..10; two views: stretched by at most half a side, 5
    assert refit.view == Box((-5, -5), (27, 15))
    core.on_batch(batch(1, rows(k1=(5, 5), k2=(20, 5)), snapshots=[refit.prim]))
    core.end_epoch()
    released = frames(core.housekeeping(now=50.0), UPSTREAM)
    assert [r.prim for r in released] == [first.prim]  # type: ignore[attr-defined]
    served = {p.sub: p for p in pushes(core, now=60.0)}  # type: ignore[union-attr]
    assert keys(served[2].entered) == [2]  # type: ignore[union-attr]


def test_a_moving_view_is_acquired_ahead_of_its_motion() -> None:
    core = relay(Policy(widen="margin", margin=0.0, lead=2.0))
    core.on_subscribe(CLIENT, Subscribe(1, "agents", Box((0, 0), (10, 10))), now=0.0)
    moved = core.on_subscribe(CLIENT, Subscribe(1, "agents", Box((20, 0), (30, 10))), now=1.0)
    (acquire,) = frames(moved, UPSTREAM)
    assert isinstance(acquire, Acquire)
    assert acquire.view == Box((20, 0), (70, 10))  # 20 units/s, 2 s ahead, on the side it goes
    # undated view changes (no clock) estimate nothing
    core.on_subscribe(CLIENT, Subscribe(2, "agents", Box((500, 0), (510, 10))))
    undated = core.on_subscribe(CLIENT, Subscribe(2, "agents", Box((520, 0), (530, 10))))
    assert [f.view for f in frames(undated, UPSTREAM)] == [Box((520, 0), (530, 10))]  # type: ignore[attr-defined]
