"""The subject bus's format (wire.bus): tokens, labels, patterns, subjects, fragments."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.wire.bus import (
    InvalidLabel,
    InvalidSubject,
    decode_row,
    encode_row,
    fragments,
    key_from_token,
    key_token,
    label_filter,
    label_from_tokens,
    label_tokens,
    object_filter,
    object_subject,
    parse_object_subject,
    pattern_tokens,
    token,
    tokens_match,
    untoken,
)

# NATS's own rule for a token: no '.', '*', '>' and no white space (nor empty).
NATS_TOKEN = re.compile(r"[^.*>\s]+")

segments = st.text(min_size=0, max_size=8)
labels = st.lists(st.sampled_from(["a", "b", "-", "x.y", "é", " ", "*", ""]), max_size=4)


@given(st.text(max_size=30))
def test_a_token_is_one_nats_token_and_reads_back(text: str) -> None:
    spelled = token(text)
    assert NATS_TOKEN.fullmatch(spelled)
    assert untoken(spelled) == text


@given(st.text(max_size=10), st.text(max_size=10))
def test_two_texts_never_share_a_token(a: str, b: str) -> None:
    assert (token(a) == token(b)) == (a == b)


@pytest.mark.parametrize("bad", ["a.b", "%zz", "%4", "a b", "%41"])  # %41 is 'A', spelled A
def test_what_token_never_makes_is_refused(bad: str) -> None:
    with pytest.raises(InvalidSubject):
        untoken(bad)


@given(st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=12)))
def test_keys_read_back_by_their_kind(key: int | str) -> None:
    assert key_from_token(key_token(key), isinstance(key, int)) == key


def test_an_integer_type_refuses_a_text_key() -> None:
    with pytest.raises(InvalidSubject):
        key_from_token("abc", integer=True)


@given(st.one_of(st.none(), st.lists(segments, min_size=1, max_size=4).map(".".join)))
def test_labels_read_back(label: str | None) -> None:
    spelled = label_tokens(label)
    assert all(NATS_TOKEN.fullmatch(part) for part in spelled)
    assert label_from_tokens(spelled) == label


def oracle_match(pattern: list[str], label: list[str]) -> bool:
    """NATS's matching, by recursion over the two lists (independent of tokens_match)."""
    if not pattern:
        return not label
    head, rest = pattern[0], pattern[1:]
    if head == ">":
        return len(label) >= 1
    if not label:
        return False
    return (head in ("*", label[0])) and oracle_match(rest, label[1:])


pattern_parts = st.lists(st.sampled_from(["a", "b", "c", "*"]), min_size=1, max_size=4).flatmap(
    lambda parts: st.sampled_from([parts, [*parts[:-1], ">"]])
)
label_parts = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=5)


@given(pattern_parts, label_parts)
def test_patterns_match_labels_as_nats_does(pattern: list[str], label: list[str]) -> None:
    expected = oracle_match(pattern, label)
    assert tokens_match(pattern_tokens(".".join(pattern)), label_tokens(".".join(label))) is (
        expected
    )


def test_only_wildcards_select_an_unlabelled_object() -> None:
    assert tokens_match(pattern_tokens(">"), label_tokens(None))
    assert tokens_match(pattern_tokens("*"), label_tokens(None))
    assert not tokens_match(pattern_tokens("*.x"), label_tokens(None))
    assert not tokens_match(pattern_tokens("-"), label_tokens(None))
    assert tokens_match(pattern_tokens("-"), label_tokens("-"))


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        ("", "segment 1 is empty"),
        ("a..b", "segment 2 is empty"),
        ("a.>.b", "'>' may only be the last"),
        ("comp*", "mixes a wildcard"),
        ("a.b>", "mixes a wildcard"),
    ],
)
def test_a_bad_label_pattern_is_a_clear_error(pattern: str, says: str) -> None:
    with pytest.raises(InvalidLabel, match=re.escape(says)):
        pattern_tokens(pattern)


def test_subjects_follow_the_namespace() -> None:
    subject = object_subject("LOADREPLY", "item", 1234, "auction", "computer.hardware.misc")
    assert subject == "LOADREPLY.item.1234.auction.computer.hardware.misc"
    read = parse_object_subject(subject)
    assert (read.kind, read.type_name, read.key_token, read.domain) == (
        "LOADREPLY",
        "item",
        "1234",
        "auction",
    )
    assert read.label_tokens == ("computer", "hardware", "misc")
    assert object_filter("*", "item", 1234, "auction") == "*.item.1234.auction.>"
    assert label_filter("*", "item", "auction", "computer.>") == "*.item.*.auction.computer.>"
    for bad in ["LOAD.item.1.auction", "NOPE.item.1.auction.-", "LOADREPLY.item.1.auction"]:
        with pytest.raises(InvalidSubject):
            parse_object_subject(bad)


@given(st.binary(max_size=200), st.integers(1, 50))
def test_fragments_join_back(data: bytes, size: int) -> None:
    pieces = fragments(data, size)
    assert b"".join(pieces) == data
    assert all(len(piece) <= size for piece in pieces)
    assert len(pieces) == max(1, -(-len(data) // size))


def test_a_row_reads_back() -> None:
    row = {"id": 7, "title": "lamp", "price": 2.5, "gone": None, "ok": True}
    assert decode_row(encode_row(row)) == row
