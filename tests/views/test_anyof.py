"""Any of several topic filters or object paths: what a view meeting several access rules is
served as (``relay.core.rules``). Its rows are checked against the members' own, one by one."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from fanout.errors import InvalidView
from fanout.views import View, covers, kind_of, residual
from fanout.views.anyof import AnyOf
from fanout.views.members import members
from fanout.views.objects import ObjectPath
from fanout.views.topic import TopicFilter

A, B, C = TopicFilter("plant/1/#"), TopicFilter("plant/2/temp"), TopicFilter("plant/+/temp")


def test_any_of_flattens_drops_repeats_and_travels_as_itself() -> None:
    either = AnyOf((A, AnyOf((B, A))))
    assert either.views == (A, B)
    assert str(either) == "plant/1/# | plant/2/temp"
    assert kind_of(either) == "topic"
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(either), type=View) == either
    for bad, says in [
        ((A,), "at least two"),
        ((A, A), "at least two"),
        ((A, ObjectPath("/cars/c1")), "must all be topic filters, or all object paths"),
        ((A, "plant/#"), "is not a topic filter or object path"),
    ]:
        with pytest.raises(InvalidView, match=says):
            AnyOf(bad)  # type: ignore[arg-type]


def test_any_of_selects_the_rows_any_member_selects() -> None:
    topics = ["plant/1/temp", "plant/2/temp", "plant/2/rpm", "plant/3/temp", "plant/1"]
    rows = {"topic": np.array(topics, dtype=object)}
    either = AnyOf((A, B))
    expected = [a or b for a, b in zip(A.match(topics), B.match(topics), strict=True)]
    assert (
        members(either, rows, ("topic",)).tolist() == expected == [True, True, False, False, True]
    )


def test_any_of_is_covered_when_every_member_is_and_its_residual_is_the_members() -> None:
    either = AnyOf((A, B))
    assert covers([TopicFilter("plant/#")], either)
    assert not covers([A], either)
    assert residual([A], either) == [B]
    assert residual([], either) == [A, B]
    assert not covers([], AnyOf((ObjectPath("/cars/c1"), ObjectPath("/cars/c2"))))
