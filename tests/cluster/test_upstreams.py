"""The forward policy's routes and pieces (``cluster.upstreams``), without sockets."""

from __future__ import annotations

import numpy as np
import pytest

from fanout.cluster.responsibility import ResponsibilityMap
from fanout.cluster.settings import Cluster, read_cluster
from fanout.cluster.upstreams import PUBLISHER, Upstreams
from fanout.errors import ConfigError
from fanout.relay.config import RelayConfig, Upstream
from fanout.testing import batches
from fanout.testing.catalog import AGENTS, sensors
from fanout.views import Box
from fanout.views.entity import Entity
from fanout.views.topic import parse as topic
from fanout.wire.messages import Acquire, Batch, Catalog, Release, Resync

MAP = ResponsibilityMap({"a": "ws://a:1", "b": "ws://b:1"})
#: Boxes of cells a and b are responsible for.
OF = {
    name: next(
        Box((x, y), (x + 10, y + 10))
        for x in range(0, 4096, 256)
        for y in range(0, 4096, 256)
        if MAP.owner_of("agents", Box((x, y), (x + 10, y + 10))).name == name
    )
    for name in ("a", "b")
}


def upstreams() -> Upstreams:
    routes = Upstreams("a")
    routes.on_catalog(Catalog([AGENTS]))
    return routes


def batch(seq: int, ids: list[int], snapshots: list[int] = ()) -> Batch:
    rows = {"id": np.asarray(ids, "<i8"), "x": np.zeros(len(ids)), "y": np.zeros(len(ids))}
    return batches.batch(
        seq, rows if ids else None, epoch=0, tick_time=float(seq), snapshots=snapshots
    )


def always(name: str) -> bool:
    return True


def test_a_part_another_relay_owns_is_acquired_there_and_released_there() -> None:
    routes = upstreams()
    assert routes.route(Acquire(1, "agents", OF["b"]), MAP, always) == "b"
    assert routes.route(Acquire(2, "agents", OF["a"]), MAP, always) == PUBLISHER
    assert routes.route(Acquire(3, "agents", OF["b"]), MAP, lambda name: False) == PUBLISHER
    assert routes.route(Release(1), MAP, always) == "b"
    assert routes.route(Release(2), MAP, always) == PUBLISHER


SENSORS = sensors(value="v")


def test_a_keyed_primitive_goes_to_the_owner_of_its_bucket_and_an_entity_to_the_publisher() -> None:
    routes = Upstreams("a")
    routes.on_catalog(Catalog([AGENTS, SENSORS]))
    filters = [topic(f"plant/{n}/#") for n in range(40)]
    owned = {f: MAP.owner_of("sensors", f).name for f in filters}
    theirs = next(f for f in filters if owned[f] == "b")
    ours = next(f for f in filters if owned[f] == "a")
    assert routes.route(Acquire(1, "sensors", theirs), MAP, always) == "b"
    assert routes.route(Acquire(2, "sensors", ours), MAP, always) == PUBLISHER
    assert routes.route(Acquire(3, "agents", Entity(7)), MAP, always) == PUBLISHER
    assert routes.route(Release(1), MAP, always) == "b"


def test_a_relay_forwards_only_to_relays_named_after_it() -> None:
    later = Upstreams("b")
    later.on_catalog(Catalog([AGENTS]))
    # b would wait for a's pieces while a waits for b's: b takes a's parts from the publisher
    assert later.route(Acquire(1, "agents", OF["a"]), MAP, always) == PUBLISHER
    assert upstreams().route(Acquire(1, "agents", OF["b"]), MAP, always) == "b"


def test_what_a_relay_below_needs_comes_from_the_publisher() -> None:
    routes = upstreams()
    assert routes.route(Acquire(1, "agents", OF["b"]), MAP, always, below=True) == PUBLISHER
    # the same view acquired again (a resync) while it is held for a relay below
    assert routes.route(Acquire(2, "agents", OF["b"]), MAP, always) == PUBLISHER
    routes.route(Release(1), MAP, always)
    routes.route(Release(2), MAP, always)
    assert routes.route(Acquire(3, "agents", OF["b"]), MAP, always) == "b"


def test_a_seq_waits_for_the_other_relays_piece_and_goes_out_merged() -> None:
    routes = upstreams()
    routes.route(Acquire(1, "agents", OF["b"]), MAP, always)
    assert [b.seq for b in routes.on_batch(PUBLISHER, batch(4, [1])).batches] == [4]
    # b's first piece is of the seq handed out last: its snapshot goes out re-stamped
    restamped = routes.on_batch("b", batch(4, [2], snapshots=[1])).batches
    assert [(b.seq, b.snapshots) for b in restamped] == [(4, [1])]
    # a piece of a seq handed out, without snapshots, is too late
    assert not routes.on_batch("b", batch(4, [2])).batches
    assert not routes.on_batch(PUBLISHER, batch(5, [1])).batches  # waits for b
    out = routes.on_batch("b", batch(5, [2, 3])).batches
    assert [(b.seq, b.upserts.length) for b in out] == [(5, 3)]


def test_a_resync_strikes_its_primitives_from_the_relays_snapshots_still_waiting() -> None:
    """A snapshot of b's that waits for the publisher's piece of its seq, then b's ``Resync``
    of that primitive: the seq goes out without it among its snapshots (its rows stay), so it
    is not made ready again until b sends it anew; b's other snapshots in it are kept."""
    routes = upstreams()
    routes.route(Acquire(1, "agents", OF["b"]), MAP, always)
    routes.route(Acquire(2, "agents", OF["b"]), MAP, always)
    routes.on_batch(PUBLISHER, batch(4, [1]))
    assert not routes.on_batch("b", batch(5, [2, 3], snapshots=[1, 2])).batches  # waits
    routes.resynced("b", Resync("agents", [1]))
    routes.resynced(PUBLISHER, Resync("agents", [2]))  # another upstream's: nothing of b's
    (out,) = routes.on_batch(PUBLISHER, batch(5, [4])).batches
    assert (out.seq, out.snapshots, out.upserts.length) == (5, [2], 3)


def test_a_lost_relay_lets_the_seqs_go_and_resyncs_its_datasets() -> None:
    routes = upstreams()
    routes.route(Acquire(1, "agents", OF["b"]), MAP, always)
    routes.on_batch("b", batch(4, [2], snapshots=[1]))
    assert not routes.on_batch(PUBLISHER, batch(5, [1])).batches
    taken = routes.lost("b")
    assert [b.seq for b in taken.batches] == [5]
    assert taken.resync == {"agents": {1}}  # the primitive held from it, no other
    assert routes.route(Release(1), MAP, always) is None  # nothing to tell a lost relay


def test_the_policy_is_redirect_or_forward_from_the_flag_or_the_file() -> None:
    assert RelayConfig(Upstream("ws://p:1")).cluster.policy == "redirect"
    with pytest.raises(ConfigError, match="--registry-policy"):
        Cluster(policy="broadcast")
    assert read_cluster({"policy": "forward"}).policy == "forward"
