"""Which relays the publisher passes a durable write to at once (publisher/passing.py), against
a brute-force oracle: MQTT filter levels matched by hand, the rules spelled out again; and the
registry's relays that want a dataset's live writes (``LiveWrites``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.publisher.passing import Choice, recipients
from fanout.publisher.relaytable import Registry
from fanout.testing.oracle import filter_matches
from fanout.views import View
from fanout.views.objects import ObjectPath
from fanout.views.objects.store import touched
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
    return filter_matches(view.topic_filter, name)


def oracle(
    held: dict[int, list[View]],
    live: set[int],
    origin: int | None,
    written: list[str],
    deletes: bool,
):
    out = []
    for relay, views in sorted(held.items()):
        if relay == origin or relay not in live or not views:
            continue
        filters = [v for v in views if isinstance(v, TopicFilter)]
        whole = deletes or len(filters) < len(views)  # a delete, or a view not by rows
        if whole or any(matches(v, name) for v in filters for name in written):
            out.append(relay)
    return out


@settings(max_examples=300, deadline=None)
@given(
    held=st.dictionaries(st.integers(1, 6), prims, max_size=5),
    live=st.sets(st.integers(1, 6)),
    origin=st.none() | st.integers(1, 6),
    written=st.lists(names, max_size=4, unique=True),
    deletes=st.booleans(),
)
def test_a_write_goes_to_each_other_relay_that_wants_it_and_whose_primitives_select_a_row(
    held: dict[int, list[View]],
    live: set[int],
    origin: int | None,
    written: list[str],
    deletes: bool,
) -> None:
    registry = Registry()
    ids = {relay: registry.add_relay(f"r{relay}") for relay in range(1, 7)}
    for relay, views in held.items():
        for prim, view in enumerate(views):
            registry.acquire(ids[relay], prim, "sensors", view)
    for relay in live:
        registry.want_live(ids[relay], "sensors", True)
        registry.want_live(ids[relay], "other", False)  # another dataset's leaves it alone
    choice, live = Choice(registry.plan("sensors")), registry.live("sensors")
    upserts = {"topic": np.array(written, dtype=object), "value": np.zeros(len(written))}
    came = None if origin is None else ids[origin]
    passed = recipients(choice, live, came, upserts, deletes=deletes, index=["topic"])
    named = {number: relay for relay, number in ids.items()}
    assert [named[number] for number in passed] == oracle(held, live, origin, written, deletes)


def test_a_relay_that_no_longer_wants_live_writes_or_left_is_passed_none() -> None:
    registry = Registry()
    first, second = registry.add_relay("first"), registry.add_relay("second")
    for relay in (first, second):
        registry.acquire(relay, 1, "sensors", topic("#"))
        registry.want_live(relay, "sensors", True)
    assert registry.plan("sensors").live == registry.live("sensors") == {first, second}
    registry.want_live(first, "sensors", False)
    registry.drop_relay(second)
    registry.want_live(second, "sensors", True)  # a frame after it left: nothing to hold
    assert registry.plan("sensors").live == registry.live("sensors") == frozenset()


#: Object paths a relay may hold (acquired without options) and the objects a write names.
OBJECT_PATHS = ["/a/.all", "/a/b/.all", "/a/b/x", "/a/b/c/.all", "/d/.all", "/.all"]
objects = st.lists(st.sampled_from(["a", "b", "c", "x", "d"]), min_size=1, max_size=4).map(
    lambda levels: "/" + "/".join(levels)
)


def paths_oracle(held: dict[int, list[str]], written: list[str], deletes: bool) -> list[int]:
    """An objects write's relays: those holding a path whose scope holds an object written or
    a directory above one (created with it); all holding a path when it deletes."""
    touched = set()
    for path in written:
        parts = path.strip("/").split("/")
        touched |= {"/" + "/".join(parts[:n]) for n in range(1, len(parts) + 1)}

    def holds(view: str, path: str) -> bool:
        if view.endswith("/.all"):
            return path.rsplit("/", 1)[0] == view[: -len("/.all")]
        return path == view

    return sorted(
        relay
        for relay, views in held.items()
        if views and (deletes or any(holds(v, p) for v in views for p in touched))
    )


@settings(max_examples=200, deadline=None)
@given(
    held=st.dictionaries(
        st.integers(1, 5), st.lists(st.sampled_from(OBJECT_PATHS), max_size=2), max_size=5
    ),
    written=st.lists(objects, max_size=3),
    deletes=st.booleans(),
)
def test_an_objects_write_goes_to_the_relays_holding_its_objects_or_the_directories_above(
    held: dict[int, list[str]], written: list[str], deletes: bool
) -> None:
    registry = Registry()
    ids = {relay: registry.add_relay(f"r{relay}") for relay in range(1, 6)}
    for relay, views in held.items():
        for prim, view in enumerate(views):
            registry.acquire(ids[relay], prim, "pps", ObjectPath(view))
        registry.want_live(ids[relay], "pps", True)
    choice = Choice(registry.plan("pps"))
    upserts = {"object": np.array(written, dtype=object), "attr": np.array([""] * len(written))}
    rows = touched(upserts, ["object"])
    passed = recipients(choice, registry.live("pps"), None, rows, deletes=deletes, index=["object"])
    named = {number: relay for relay, number in ids.items()}
    assert [named[number] for number in passed] == paths_oracle(held, written, deletes)
