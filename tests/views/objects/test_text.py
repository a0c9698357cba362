"""The PPS text format (views.objects.text): round trips and the errors a writer sees."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.errors import InvalidWrite
from fanout.views.objects.text import (
    Changed,
    Created,
    DeleteAttribute,
    Deleted,
    SetAttribute,
    Value,
    format_notices,
    format_object,
    format_write,
    parse_notices,
    parse_write,
)

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.]{0,8}", fullmatch=True)
strings = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x7f"), max_size=12
).filter(lambda text: not any(ord(c) < 32 and c != "\t" for c in text))
values = st.one_of(
    strings.map(lambda text: Value("", text)),
    st.integers(-(10**12), 10**12).map(lambda n: Value("n", str(n))),
    st.booleans().map(lambda b: Value("b", "true" if b else "false")),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2).map(
        lambda d: Value("json", json.dumps(d))
    ),
)
set_lines = st.builds(SetAttribute, names, values, st.integers(0, 9), st.booleans())
write_lines = st.one_of(set_lines, st.builds(DeleteAttribute, names))
object_names = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)


@given(st.lists(write_lines, min_size=1, max_size=8))
def test_a_write_reads_back_to_its_lines(lines: list[SetAttribute | DeleteAttribute]) -> None:
    assert parse_write(format_write(lines)) == lines


@given(
    st.lists(
        st.one_of(
            st.builds(Created, object_names),
            st.builds(Deleted, object_names),
            st.builds(
                Changed,
                object_names,
                st.dictionaries(names, st.one_of(st.none(), values), max_size=4),
            ),
        ),
        max_size=6,
    )
)
def test_notices_read_back(notices: list[Created | Deleted | Changed]) -> None:
    assert parse_notices(format_notices(notices)) == notices


@given(object_names, st.dictionaries(names, values, max_size=5))
def test_an_object_reads_as_a_header_and_its_attributes_in_name_order(
    name: str, attributes: dict[str, Value]
) -> None:
    text = format_object(name, attributes)
    lines = text.removesuffix("\n").split("\n")  # lines end at "\n" alone (a value may hold NEL)
    assert lines[0] == f"@{name}"
    assert [line.split(":", 1)[0] for line in lines[1:]] == sorted(attributes)
    assert parse_notices(text) == [Changed(name, attributes)]


def test_options_set_quality_and_persistence() -> None:
    assert parse_write("[q=7,n]speed:n:42\n\nstate::on\r\n-error\n") == [
        SetAttribute("speed", Value("n", "42"), 7, False),
        SetAttribute("state", Value("", "on"), 0, True),
        DeleteAttribute("error"),
    ]
    assert parse_write("url::http://x/?a=b:c") == [
        SetAttribute("url", Value("", "http://x/?a=b:c"))
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[q=12]speed:n:1", "quality '12' must be an integer from 0 to 9"),
        ("[x]speed:n:1", "unknown option 'x'"),
        ("[n,n]speed:n:1", "option 'n' given twice"),
        ("[q=3speed:n:1", "no ']' closes"),
        ("speed", "expected name:encoding:value"),
        ("speed:n:fast", "'fast' is not a finite number"),
        ("on:b:yes", "'yes' is not true or false"),
        ("doc:json:{", "is not JSON"),
        ("blob:b64:***", "is not base64"),
        ("x:zip:1", "unknown encoding 'zip'"),
        ("9lives::1", "attribute name '9lives'"),
        ("-", "attribute name ''"),
        ("\n\n", "at least one line"),
        ("ok::1\nbad", "line 2"),
        ("tab::a\x01b", "control character U+0001"),
    ],
)
def test_a_bad_write_names_its_problem(text: str, problem: str) -> None:
    with pytest.raises(InvalidWrite, match=re.escape(problem)):
        parse_write(text)
