"""Transduced subscriptions in whole relay conversations, sans I/O (relay/core/transducing.py):
their output instead of their view, refusals, and a stopped transducer ending its subscription
alone while the relay's other subscribers keep being served."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
from tests.relay.core.conversations import CLIENT, batch, frames, relay, rows

from fanout.relay.core.relaycore import UPSTREAM, RelayCore
from fanout.testing.relaycore import ready_core
from fanout.transducers import Budget, Transducers
from fanout.views import Box
from fanout.wire.columns import decode_columns, encode_columns
from fanout.wire.messages import (
    Acquire,
    Error,
    NoUpdate,
    Push,
    Subscribe,
    Subscribed,
    Unsubscribe,
    Unsubscribed,
)
from fanout.wire.options import Resume, Transduce

OTHER = 2
VIEW = Box((0, 0), (10, 10))
CELLS = "SELECT floor(x / 5)::BIGINT AS cell, count(*) AS n FROM history GROUP BY cell"


def subscribe(core: RelayCore, client: int, transduce: Transduce | None, sub: int = 1) -> list:
    request = Subscribe(sub, "agents", VIEW, rate=1000.0, transduce=transduce)
    return core.on_subscribe(client, request)


def served(core: RelayCore, now: float = 100.0) -> list[tuple[int, object]]:
    return [(send.to, send.message()) for send in core.pushes(now, lambda client: True)]


def started(transduce: Transduce) -> tuple[RelayCore, Subscribed]:
    """A relay holding agents, a transduced subscription of CLIENT and a plain one of OTHER."""
    core = relay()
    sends = subscribe(core, CLIENT, transduce)
    (subscribed,) = frames(sends, CLIENT)
    (acquire,) = frames(sends, UPSTREAM)
    assert isinstance(acquire, Acquire)
    subscribe(core, OTHER, None)
    core.on_batch(batch(0, rows(k1=(1, 1), k2=(2, 2), k3=(7, 7)), snapshots=[acquire.prim]))
    assert isinstance(subscribed, Subscribed)
    return core, subscribed


def table(push: object) -> dict[str, list]:
    assert isinstance(push, Push)
    return {name: values.tolist() for name, values in decode_columns(push.entered).items()}


def test_a_transduced_subscription_gets_the_transducers_output() -> None:
    core, subscribed = started(Transduce("window", {"query": CELLS, "ticks": 2}))
    assert (subscribed.key, subscribed.columns) == ("cell", ["cell", "n"])
    assert core.stats()["transduced"] == 1
    first = dict(served(core))
    assert table(first[CLIENT]) == {"cell": [0, 1], "n": [2, 1]}
    assert sorted(table(first[OTHER])["id"]) == [1, 2, 3]  # the plain view, untouched
    core.on_batch(batch(1, rows(k3=(3, 3))))  # k3 moves into cell 0
    second = dict(served(core))
    push = second[CLIENT]
    assert isinstance(push, Push) and not push.full
    updated = decode_columns(push.updated)
    assert (updated["cell"].tolist(), updated["n"].tolist()) == ([0], [5])  # 2 + 3 rows in 2 ticks
    assert decode_columns(push.entered)["cell"].tolist() == []  # cell 1 kept its count


def test_a_stopped_transducer_ends_its_subscription_alone() -> None:
    failing = "SELECT id, CAST('x' || id AS INTEGER) AS bad FROM history"
    core, _ = started(Transduce("window", {"query": failing}))
    first = served(core)
    (error,) = [frame for to, frame in first if to == CLIENT]
    assert isinstance(error, Error)
    assert (error.code, error.ref) == ("transducer_stopped", 1)
    assert "the transducer was stopped: its query failed: Conversion Error" in error.message
    assert core.stats()["transducers_stopped"] == 1
    assert core.stats()["transduced"] == 0
    core.on_batch(batch(1, rows(k1=(4, 4))))
    later = served(core)
    assert [to for to, _ in later] == [OTHER]  # nothing more for the stopped one
    assert isinstance(later[0][1], Push | NoUpdate)


def test_an_unknown_transducer_is_refused_when_subscribing() -> None:
    core = relay()
    (error,) = subscribe(core, CLIENT, Transduce("nope"))
    assert isinstance(error.frame, Error)
    assert error.frame.code == "invalid_transducer"
    assert "no transducer 'nope'" in error.frame.message


def test_a_subscriptions_transducer_cannot_change_but_its_view_can() -> None:
    core, _ = started(Transduce("window", {"query": CELLS}))
    served(core)
    (error,) = subscribe(core, CLIENT, Transduce("window", {"query": CELLS, "ticks": 3}))
    assert isinstance(error.frame, Error) and "cannot change" in error.frame.message
    request = Subscribe(
        1,
        "agents",
        Box((0, 0), (5, 5)),
        rate=1000.0,
        transduce=Transduce("window", {"query": CELLS}),
    )
    assert frames(core.on_subscribe(CLIENT, request), CLIENT) == []
    push = dict(served(core, 101.0))[CLIENT]
    assert isinstance(push, Push)
    assert decode_columns(push.left)["cell"].tolist() == [1]  # k3 is outside the new view


def test_unsubscribing_ends_the_session() -> None:
    core, _ = started(Transduce("window", {"query": CELLS}))
    assert core.transducing.transduced((CLIENT, 1))
    sends = core.on_unsubscribe(CLIENT, Unsubscribe(1))
    assert [send.frame for send in sends] == [Unsubscribed(1)]
    assert not core.transducing.transduced((CLIENT, 1))
    assert [to for to, _ in served(core)] == [OTHER]


def test_an_every_subscription_is_transduced_seq_by_seq() -> None:
    core = relay()
    transduce = Transduce(
        "window", {"query": "SELECT 'all' AS rows, count(*) AS n FROM history", "ticks": 2}
    )
    request = Subscribe(1, "agents", VIEW, mode="every", transduce=transduce)
    (acquire,) = frames(core.on_subscribe(CLIENT, request), UPSTREAM)
    core.on_batch(batch(0, rows(k1=(1, 1)), snapshots=[acquire.prim]))
    outputs = [frame for _, frame in served(core)]
    for seq, moved in ((1, rows(k2=(2, 2))), (2, rows(k9=(50, 50))), (3, rows(k3=(3, 3)))):
        core.on_batch(batch(seq, moved))
        outputs += [frame for _, frame in served(core, 100.0 + seq)]
    assert [frame.seq for frame in outputs] == [0, 1, 2, 3]  # one output frame per seq
    counts = []
    for frame in outputs:
        if isinstance(frame, Push):
            counts.append(
                decode_columns(frame.entered if frame.full else frame.updated)["n"].tolist()
            )
        else:
            counts.append("no update")
    # 1 row; 1 + 2; 2 + 2 (k9 is outside the view: its seq changes nothing there); 2 + 3
    assert counts == [[1], [3], [4], [5]]


def test_a_plain_subscription_beside_a_transduced_one_gets_its_view() -> None:
    core, _ = started(Transduce("window", {"query": CELLS}))
    (subscribed,) = frames(subscribe(core, CLIENT, None, sub=2), CLIENT)
    assert isinstance(subscribed, Subscribed) and subscribed.key == "id"
    by_sub = {frame.sub: frame for to, frame in served(core) if to == CLIENT}
    assert sorted(table(by_sub[2])["id"]) == [1, 2, 3]
    assert table(by_sub[1]) == {"cell": [0, 1], "n": [2, 1]}


def test_a_transduced_subscription_does_not_resume() -> None:
    core = relay()
    keys = encode_columns({"id": np.array([1])})
    transduce = Transduce("window", {"query": CELLS})
    request = Subscribe(
        1, "agents", VIEW, mode="every", resume=Resume(1, 5, keys), transduce=transduce
    )
    (error,) = core.on_subscribe(CLIENT, request)
    assert isinstance(error.frame, Error) and error.frame.code == "invalid_transducer"
    assert "does not resume" in error.frame.message


class Count:
    """A Python transducer: the rows of the newest tick, counted."""

    ticks = 1

    def __init__(self, params: object) -> None:
        pass

    def output(self, schema: pa.Schema) -> tuple[str, list[str]]:
        return "rows", ["rows", "n"]

    def evaluate(self, history: pa.Table) -> pa.Table:
        return pa.table({"rows": ["all"], "n": [history.num_rows]})


class Installed:
    """An entry point as ``importlib.metadata`` gives one."""

    name = "count"

    def load(self) -> type[Count]:
        return Count


def test_a_connection_whose_transducers_take_more_than_their_share_is_stopped() -> None:
    seconds = itertools.count(0.0, 0.6)  # each evaluation takes 0.6 s by this clock
    budget = Budget(seconds=1.0, share=0.25, burst=1.0)
    transducers = Transducers(budget, [Installed()], clock=lambda: next(seconds))  # type: ignore[list-item]
    core = ready_core(transducers=transducers)
    (acquire,) = frames(subscribe(core, CLIENT, Transduce("count")), UPSTREAM)
    subscribe(core, OTHER, None)
    core.on_batch(batch(0, rows(k1=(1, 1)), snapshots=[acquire.prim]))
    outputs: list[object] = []
    for seq in range(1, 12):
        outputs += [frame for to, frame in served(core, 100.0 + seq) if to == CLIENT]
        core.on_batch(batch(seq, rows(k1=(1, 1 + seq % 2))))
    pushed = [frame for frame in outputs if isinstance(frame, Push | NoUpdate)]
    (error,) = [frame for frame in outputs if isinstance(frame, Error)]
    assert error.code == "transducer_stopped"
    assert "took more than their share of the relay's loop, 0.25 s a second" in error.message
    assert 3 <= len(pushed) < 11  # the first second's burst, then a quarter second a second
    assert outputs[-1] is error  # nothing after it
    assert [to for to, _ in served(core, 200.0)] == [OTHER]
