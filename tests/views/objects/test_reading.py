"""PPS reads (views.objects.reading): a delta reader that reads at any moments, replaying what it
read, ends where a full read of the final state is; notices say what a plain diff says."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.views.objects.reading import ChangeStatus, apply_push, full_text
from fanout.views.objects.store import ObjectStore
from fanout.views.objects.text import (
    Changed,
    Created,
    Deleted,
    SetAttribute,
    Value,
    parse_notices,
)

OBJECTS = ("/d/a", "/d/b")

steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("set"),
            st.sampled_from(OBJECTS),
            st.sampled_from("pq"),
            st.text("xy", max_size=2),
        ),
        st.tuples(st.just("unset"), st.sampled_from(OBJECTS), st.sampled_from("pq")),
        st.tuples(st.just("delete"), st.sampled_from(OBJECTS)),
        st.tuples(st.just("read")),
    ),
    max_size=30,
)


def replay(model: dict[str, dict[str, str]], text: str) -> None:
    """The oracle: lay a read's text over a dict of objects, as a reader of it would."""
    for notice in parse_notices(text):
        match notice:
            case Created(name):
                model.setdefault(name, {})
            case Deleted(name):
                model.pop(name, None)
            case Changed(name, attributes):
                held = model.setdefault(name, {})
                for attr, value in attributes.items():
                    if value is None:
                        held.pop(attr, None)
                    else:
                        held[attr] = value.text


@settings(max_examples=200)
@given(steps, st.integers(1, 40))
def test_a_delta_reader_replays_to_the_full_state(
    script: list[tuple[str, ...]], limit: int
) -> None:
    publisher, copy = ObjectStore(), ObjectStore()  # the publisher's cells; a reader's copy
    status = ChangeStatus(limit=limit)
    model: dict[str, dict[str, str]] = {}
    for step in [*script, ("read",)]:
        match step:
            case ("set", obj, attr, text):
                effects = publisher.write(obj, [SetAttribute(attr, Value("", text))])
            case ("unset", obj, attr):
                effects = (
                    publisher.admit([], [f"{obj}?{attr}"]) if publisher.is_object(obj) else None
                )
            case ("delete", obj):
                effects = publisher.delete_object(obj) if publisher.is_object(obj) else None
            case _:
                full = status.full_next
                text = status.take(copy, "/d/.all")
                if full:
                    assert text == full_text(copy, "/d/.all")
                    model.clear()
                replay(model, text)
                effects = None
        if effects is not None:
            status.offer(apply_push(copy, effects.upserts, effects.deletes))
    expected = {
        obj.rsplit("/", 1)[1]: {attr: v.text for attr, v in copy.attributes(obj).items()}
        for obj in copy.entries("/d")
    }
    assert model == expected
    assert copy.cells == publisher.cells
