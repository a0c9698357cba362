"""The snoopy cache's pure core (cache.core) against brute-force oracles."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.cache.core import CacheCore, Reassembly
from fanout.wire.bus import ObjectMessage, fragments, pattern_tokens

KEYS = [1, 2, 3, 4, 5]
LABELS = [None, "a", "a.b", "b.c", "a.c"]

# A message about key k: (kind, key, version, exists, label)
messages = st.tuples(
    st.sampled_from(["LOADREPLY", "UPDATENOTIFY", "CREATE", "DELETE"]),
    st.sampled_from(KEYS),
    st.integers(0, 20),
    st.booleans(),
    st.sampled_from(LABELS),
)
steps = st.lists(
    st.one_of(
        messages.map(lambda m: ("message", m)),
        st.sampled_from(KEYS).map(lambda k: ("want", k)),
        st.sampled_from(KEYS).map(lambda k: ("read", k)),
    ),
    max_size=60,
)


def offer(core: CacheCore, message: tuple) -> object:
    kind, key, version, exists, label = message
    if kind == "DELETE":
        exists = False
    if not exists and kind != "LOADREPLY":
        kind = "DELETE"
    row = {"id": key, "v": version, "label": label} if exists else None
    return core.offer(
        kind,
        ("item", key),
        version=version,
        row=row,
        label=label,
    )


@given(steps, st.integers(1, 4), st.sampled_from([None, "a.>", "*.c", ">"]))
def test_no_older_version_after_a_newer_one(
    steps: list, capacity: int, pattern: str | None
) -> None:
    """Rule 1 (and 4): per key, the versions the cache shows never go down, evictions
    included; the oracle is the largest version ever shown per key."""
    core = CacheCore(capacity)
    if pattern is not None:
        core.follow("item", pattern_tokens(pattern))
    shown: dict[int, int] = {}
    for what, arg in steps:
        if what == "want":
            core.want(("item", arg))
        elif what == "message":
            change = offer(core, arg)
            if change is not None:
                assert change.version >= shown.get(arg[1], -1)
                shown[arg[1]] = change.version
        else:
            entry = core.read(("item", arg))
            if entry is not None:
                assert entry.version >= shown.get(arg, -1)
                shown[arg] = entry.version
        assert core.unpinned() <= capacity


def selects(pattern: str, label: str | None) -> bool:
    """Oracle of a pattern selecting a label, by hand (NATS's ``*`` and a last ``>``); no label
    is one segment that only wildcards select."""
    parts = pattern.split(".")
    segments = [object()] if label is None else label.split(".")
    if parts[-1] == ">":
        head = parts[:-1]
        return len(segments) > len(head) and all(
            p in ("*", s) for p, s in zip(head, segments, strict=False)
        )
    return len(parts) == len(segments) and all(
        p in ("*", s) for p, s in zip(parts, segments, strict=True)
    )


changes = st.lists(
    st.tuples(st.sampled_from(KEYS), st.booleans(), st.sampled_from(LABELS)), max_size=40
)


@given(changes, st.sampled_from(["a.>", "*.c", ">", "a", "*"]))
def test_a_collection_holds_what_its_pattern_selects(changes: list, pattern: str) -> None:
    """Rule 3: the connector publishes each change in version order under the object's label
    (and its old label too when the label moved: ``publisher.bustable``); the bus delivers what
    the collection's subscription matches. Afterwards the collection holds exactly the objects
    that exist with a label the pattern selects (oracle: the last change per key)."""
    core = CacheCore(1)
    collection = core.follow("item", pattern_tokens(pattern))
    last: dict[int, tuple[bool, str | None]] = {}
    for version, (key, exists, new_label) in enumerate(changes, start=1):
        label, subjects = new_label, {new_label}
        if key in last and last[key][0] and last[key][1] != label:
            subjects.add(last[key][1])
        if not exists and key in last:
            label = last[key][1]  # a delete is published under the old row's label
            subjects = {label}
        for under in subjects:
            if selects(pattern, under):
                core.offer(
                    "UPDATENOTIFY" if exists else "DELETE",
                    ("item", key),
                    version=version,
                    row={"id": key, "label": label} if exists else None,
                    label=label,
                )
        last[key] = (exists, label)
    expected = {key for key, (exists, label) in last.items() if exists and selects(pattern, label)}
    assert core.collections[collection].members == expected


def test_a_deleted_object_stays_deleted_against_an_older_reply() -> None:
    core = CacheCore(4)
    core.want(("item", 1))
    offer(core, ("UPDATENOTIFY", 1, 5, True, "a"))
    offer(core, ("DELETE", 1, 6, False, "a"))
    assert offer(core, ("LOADREPLY", 1, 5, True, "a")) is None
    entry = core.read(("item", 1))
    assert entry is not None and not entry.found and entry.version == 6
    assert core.counters.stale == 1


def test_a_missing_object_is_valid_and_absent_until_created() -> None:
    core = CacheCore(4)
    core.want(("item", 9))
    assert offer(core, ("LOADREPLY", 9, 0, False, None)) is not None
    entry = core.read(("item", 9))
    assert entry is not None and entry.row is None
    assert offer(core, ("CREATE", 9, 3, True, None)) is not None
    assert core.read(("item", 9)).row == {"id": 9, "v": 3, "label": None}


def test_what_nobody_asked_for_is_ignored_and_lru_is_evicted() -> None:
    core = CacheCore(2)
    assert offer(core, ("UPDATENOTIFY", 1, 1, True, None)) is None
    assert core.want(("item", 1)) == []
    assert core.want(("item", 2)) == []
    core.read(("item", 1))  # not valid: no move
    offer(core, ("UPDATENOTIFY", 1, 1, True, None))
    core.read(("item", 1))  # 1 is now the most recently used
    assert core.want(("item", 3)) == [("item", 2)]
    assert core.counters.evicted == 1


def test_counters_tell_hits_snoops_and_own_loads_apart() -> None:
    core = CacheCore(4)
    core.want(("item", 1))
    assert core.read(("item", 1)) is None
    core.fault(("item", 1))
    core.offer(
        "LOADREPLY",
        ("item", 1),
        version=2,
        row={"id": 1},
        label=None,
        own=True,
    )
    core.read(("item", 1))
    offer(core, ("UPDATENOTIFY", 1, 3, True, None))
    assert (core.counters.hits, core.counters.faults, core.counters.snooped) == (1, 1, 1)


@given(st.binary(max_size=300), st.integers(1, 40), st.randoms(use_true_random=False))
def test_fragments_in_any_order_and_repeated_reassemble_once(
    data: bytes, size: int, shuffle: random.Random
) -> None:
    pieces = fragments(data, size)
    sent = [
        ObjectMessage("r1", 4, True, part, len(pieces), piece, 0.0)
        for part, piece in enumerate(pieces)
    ]
    arriving = sent + shuffle.sample(sent, k=len(sent) // 2)
    shuffle.shuffle(arriving)
    reassembly = Reassembly()
    done = [whole for m in arriving if (whole := reassembly.add("S", m)) is not None]
    assert done[0] == data
    # Duplicates after completion start a new message that never completes alone, or (one
    # fragment) complete again: never anything but the original.
    assert all(whole == data for whole in done)


def test_reassembly_is_bounded_and_refuses_impossible_numbering() -> None:
    reassembly = Reassembly(max_partial=2)
    for request in ("a", "b", "c"):
        assert reassembly.add("S", ObjectMessage(request, 1, True, 0, 2, b"x", 0.0)) is None
    assert (reassembly.partial, reassembly.dropped) == (2, 1)
    with pytest.raises(ValueError, match="no fragment"):
        reassembly.add("S", ObjectMessage("d", 1, True, 3, 2, b"x", 0.0))
    with pytest.raises(ValueError, match="earlier ones"):
        reassembly.add("S", ObjectMessage("b", 1, True, 0, 3, b"x", 0.0))
