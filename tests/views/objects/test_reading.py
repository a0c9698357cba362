"""PPS reads (views.objects.reading): a delta reader that reads at any moments, replaying what it
read, ends where a full read of the final state is; it sees every change of each attribute in
order (against the sequence of writes); a full queue says ``|@name`` and reads full."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.views.objects.reading import ChangeStatus, apply_push, full_text, names_text
from fanout.views.objects.store import ObjectStore
from fanout.views.objects.text import (
    Changed,
    Created,
    DeleteAttribute,
    Deleted,
    Overflowed,
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
            case Overflowed(_):
                model.clear()  # a full read follows
            case Changed(name, attributes):
                held = model.setdefault(name, {})
                for attr, value in attributes.items():
                    if value is None:
                        held.pop(attr, None)
                    else:
                        held[attr] = value.text


@settings(max_examples=200)
@given(steps, st.integers(1, 400))
def test_a_delta_reader_replays_to_the_full_state(
    script: list[tuple[str, ...]], backlog: int
) -> None:
    publisher, copy = ObjectStore(), ObjectStore()  # the publisher's cells; a reader's copy
    status = ChangeStatus(backlog)
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
                    said = "|@.all\n" if status.overflows else ""
                    assert text in (full_text(copy, "/d/.all"), said + full_text(copy, "/d/.all"))
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


# A push is one seq: each (object, attribute) at most once, its value or None (deleted).
pushes = st.lists(
    st.one_of(
        st.dictionaries(
            st.tuples(st.sampled_from(OBJECTS), st.sampled_from("pqr")),
            st.one_of(st.none(), st.sampled_from(["1", "2", "3"])),
            min_size=1,
            max_size=4,
        ),
        st.just("read"),
    ),
    max_size=40,
)


@settings(max_examples=300)
@given(pushes)
def test_a_delta_reader_sees_each_attributes_writes_in_order(
    script: list[dict[tuple[str, str], str | None] | str],
) -> None:
    publisher, copy = ObjectStore(), ObjectStore()
    status = ChangeStatus()  # 256 KiB: no overflow here
    status.take(copy, "/d/.all")  # the first, full read; the sequences start after it
    written: dict[tuple[str, str], list[str | None]] = {}  # the oracle: each change, in order
    seen: dict[tuple[str, str], list[str | None]] = {}
    for step in [*script, "read"]:
        if step == "read":
            for notice in parse_notices(status.take(copy, "/d/.all")):
                assert not isinstance(notice, Overflowed | Deleted)
                if isinstance(notice, Changed):
                    for attr, value in notice.attributes.items():
                        seen.setdefault(("/d/" + notice.name, attr), []).append(
                            None if value is None else value.text
                        )
            continue
        assert isinstance(step, dict)
        for obj in OBJECTS:  # one write per object: a push with several of its attributes
            lines: list[SetAttribute | DeleteAttribute] = []
            for (held_obj, attr), text in step.items():
                if held_obj != obj:
                    continue
                held = publisher.cells.get(f"{obj}?{attr}")
                if (held.value.text if held else None) != text:  # the held value is no change
                    written.setdefault((obj, attr), []).append(text)
                lines.append(
                    DeleteAttribute(attr) if text is None else SetAttribute(attr, Value("", text))
                )
            if lines:
                effects = publisher.write(obj, lines)
                status.offer(apply_push(copy, effects.upserts, effects.deletes))
    assert seen == written


def test_a_full_queue_says_so_and_reads_full() -> None:
    publisher, copy = ObjectStore(), ObjectStore()
    status = ChangeStatus(backlog=40)
    status.take(copy, "/d/.all")
    for n in range(10):  # about 20 bytes each: past 40 the queue is dropped
        effects = publisher.write("/d/a", [SetAttribute("p", Value("n", str(n)))])
        status.offer(apply_push(copy, effects.upserts, effects.deletes))
    assert status.overflows == 1
    assert status.take(copy, "/d/.all") == "|@.all\n@a\np:n:9\n"
    assert status.take(copy, "/d/.all") == ""  # and then the changes again


def test_deltadir_gives_names_created_and_deleted_only() -> None:
    publisher, copy = ObjectStore(), ObjectStore()
    status = ChangeStatus(names_only=True)
    for obj in ("/d/a", "/d/b"):
        effects = publisher.write(obj, [SetAttribute("p", Value("", "x"))])
        status.offer(apply_push(copy, effects.upserts, effects.deletes))
    assert status.take(copy, "/d/.all") == names_text(copy, "/d/.all") == "+@a\n+@b\n"
    for effects in (
        publisher.write("/d/a", [SetAttribute("p", Value("", "y"))]),
        publisher.write("/d/c", [SetAttribute("p", Value("", "x"))]),
        publisher.delete_object("/d/b"),
    ):
        status.offer(apply_push(copy, effects.upserts, effects.deletes))
    assert status.take(copy, "/d/.all") == "+@c\n-@b\n"
