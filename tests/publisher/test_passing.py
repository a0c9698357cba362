"""Which relays the publisher passes a durable write to at once (publisher/passing.py), against
a brute-force oracle: MQTT filter levels matched by hand, the rules spelled out again."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.publisher.passing import recipients
from fanout.publisher.relaytable import Plan
from fanout.views import View
from fanout.views.sql import parse as sql
from fanout.views.topic import TopicFilter
from fanout.views.topic import parse as topic

LEVELS = ["a", "b", "c"]
names = st.lists(st.sampled_from(LEVELS), min_size=1, max_size=3).map("/".join)
filters = st.builds(
    lambda levels, tail: "/".join(levels + tail),
    st.lists(st.sampled_from([*LEVELS, "+"]), min_size=1, max_size=3),
    st.sampled_from([[], ["#"]]),
)
#: A relay's primitives of the dataset: topic filters, now and then a SQL view's.
prims = st.lists(st.one_of(filters.map(topic), st.just(sql("SELECT * FROM sensors"))), max_size=3)


def matches(view: TopicFilter, name: str) -> bool:
    wanted, levels = view.topic_filter.split("/"), name.split("/")
    for at, level in enumerate(wanted):
        if level == "#":
            return True
        if at >= len(levels) or level not in ("+", levels[at]):
            return False
    return len(wanted) == len(levels)


def oracle(held: dict[int, list[View]], origin: int | None, written: list[str], deletes: bool):
    out = []
    for relay, views in sorted(held.items()):
        if relay == origin or not views:
            continue
        filters = [v for v in views if isinstance(v, TopicFilter)]
        whole = deletes or len(filters) < len(views)  # a delete, or a view not by rows
        if whole or any(matches(v, name) for v in filters for name in written):
            out.append(relay)
    return out


@settings(max_examples=300, deadline=None)
@given(
    held=st.dictionaries(st.integers(1, 6), prims, max_size=5),
    origin=st.none() | st.integers(1, 6),
    written=st.lists(names, max_size=4, unique=True),
    deletes=st.booleans(),
)
def test_a_write_goes_to_each_other_relay_whose_primitives_select_a_row_of_it(
    held: dict[int, list[View]], origin: int | None, written: list[str], deletes: bool
) -> None:
    plan = Plan(
        1,
        frozenset(held),
        {relay: dict(enumerate(views)) for relay, views in held.items()},
        {relay: frozenset() for relay in held},
    )
    upserts = {"topic": np.array(written, dtype=object), "value": np.zeros(len(written))}
    assert recipients(plan, origin, upserts, deletes, ["topic"]) == oracle(
        held, origin, written, deletes
    )
