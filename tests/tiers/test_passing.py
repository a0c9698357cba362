"""A leader passing its workers' writes to its other workers before the publisher answers
(``tiers.passing``), sans I/O: the workers are relays below a real ``Relays``, each holding topic
primitives; the leader's forwarding and the publisher's answers are played by hand."""

from __future__ import annotations

import numpy as np
import pytest

from fanout.relay.core.sends import Send
from fanout.testing.catalog import sensors
from fanout.testing.relaycore import ready_core
from fanout.tiers.below import Relays
from fanout.tiers.held import Below, Held
from fanout.tiers.passing import PassedWrites
from fanout.views.topic import parse as topic
from fanout.wire.columns import encode_columns
from fanout.wire.messages import Error, Pending, Publish, Published, Settled, Written

WRITER, HOLDER, ELSEWHERE, DEAF = 1, 2, 3, 4


def workers() -> tuple[Relays, PassedWrites]:
    """Four workers holding ``a/#`` (``ELSEWHERE``: ``b/#``), taking live writes but ``DEAF``."""
    relays = Relays(ready_core(sensors()))
    kind = relays.core.parts.kinds["sensors"]
    for client, held in ((WRITER, "a/#"), (HOLDER, "a/#"), (ELSEWHERE, "b/#"), (DEAF, "a/#")):
        prim = Held(1, "sensors", kind.primitive(topic(held)), live=True)
        wanted = set() if client == DEAF else {"sensors"}
        relays.below[client] = Below(client, f"worker-{client}", {1: prim}, live_writes=wanted)
    return relays, PassedWrites(relays)


def publish(req: int, rows: dict[str, float], deletes: tuple[str, ...] = ()) -> Publish:
    upserts = {"topic": np.array(list(rows), dtype=object), "value": np.array(list(rows.values()))}
    keys = encode_columns({"topic": np.array(deletes, dtype=object)})
    return Publish(req, "sensors", encode_columns(upserts), keys)


def sent(writes: PassedWrites, client: int, request: Publish) -> list[Send]:
    """``client``'s write forwarded upstream: what goes to the other workers at once."""
    writes.forwarding(client, request)
    return writes.forwarded(client, request)


def test_a_write_goes_at_once_to_the_other_workers_it_concerns_then_its_offsets() -> None:
    relays, writes = workers()
    request = publish(-1, {"a/1": 5.0})
    (pending,) = sent(writes, WRITER, request)
    assert pending == Send(HOLDER, Pending(1, "sensors", request.upserts, request.deletes))
    # Meanwhile a subscriber on another worker came to hold the row: that one gets ``Written``.
    relays.below[ELSEWHERE].prims[2] = Held(
        2, "sensors", relays.core.parts.kinds["sensors"].primitive(topic("a/1")), live=True
    )
    answer = writes.answered(WRITER, Published(-1, 7, 8))
    logged = Written("sensors", 7, 8, request.upserts, request.deletes)
    assert answer == [Send(HOLDER, Settled(1, 7, 8)), Send(ELSEWHERE, logged)]
    assert len(writes) == 0 and writes.passed == 1


def test_a_refused_write_is_withdrawn_where_it_was_passed_and_goes_nowhere_else() -> None:
    _, writes = workers()
    sent(writes, WRITER, publish(-1, {"a/1": 5.0}))
    error = Error("invalid_write", "no such column", ref=-1)
    assert writes.answered(WRITER, error) == [Send(HOLDER, Settled(1))]
    assert writes.answered(WRITER, error) == []  # answered once
    assert len(writes) == 0


def test_a_write_that_deletes_goes_to_every_worker_taking_live_writes_but_its_own() -> None:
    _, writes = workers()
    to = [send.to for send in sent(writes, HOLDER, publish(-4, {}, deletes=("z/9",)))]
    assert to == [WRITER, ELSEWHERE]


def test_a_write_refused_before_it_went_upstream_is_passed_to_no_one() -> None:
    """Admission or the forwarder refused it: answered while being forwarded, as on one process,
    where a write refused at once is shown to no one."""
    _, writes = workers()
    request = publish(-2, {"a/1": 5.0})
    writes.forwarding(WRITER, request)
    assert writes.answered(WRITER, Error("unavailable", "no publisher", ref=-2)) == []
    assert writes.forwarded(WRITER, request) == []
    assert (len(writes), writes.passed) == (0, 0)


def test_writes_of_two_workers_under_the_same_req_are_told_apart() -> None:
    _, writes = workers()
    first, second = publish(-1, {"a/1": 1.0}), publish(-1, {"a/2": 2.0})
    assert [s.frame.ref for s in sent(writes, WRITER, first)] == [1]  # type: ignore[union-attr]
    assert [s.frame.ref for s in sent(writes, HOLDER, second)] == [2]  # type: ignore[union-attr]
    assert writes.answered(HOLDER, Published(-1, 3, 3)) == [Send(WRITER, Settled(2, 3, 3))]
    assert writes.answered(WRITER, Error("refused", "no", ref=-1)) == [Send(HOLDER, Settled(1))]


def test_a_write_not_of_whole_rows_is_passed_to_no_one() -> None:
    """Rows the leader cannot read (a column missing): the publisher will refuse them; if it
    logs them after all, the workers they concern get ``Written`` as before."""
    _, writes = workers()
    bad = Publish(-3, "sensors", encode_columns({"topic": np.array(["a/1"], dtype=object)}))
    assert sent(writes, WRITER, bad) == []
    assert writes.invalid == 1
    assert writes.answered(WRITER, Error("invalid_write", "columns", ref=-3)) == []


@pytest.mark.parametrize("answer", [Published(-1, 4, 4), Error("unavailable", "lost", ref=-1)])
def test_a_worker_told_pending_never_also_gets_written(answer: Published | Error) -> None:
    _, writes = workers()
    sent(writes, WRITER, publish(-1, {"a/1": 5.0}))
    answered = writes.answered(WRITER, answer)
    assert [send.to for send in answered] == [HOLDER]
    assert all(isinstance(send.frame, Settled) for send in answered)
