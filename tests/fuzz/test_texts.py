"""Fuzzing the text syntaxes a user types: views of every kind and ``fanout.toml``. Any text is
parsed or refused with the library's own error (``InvalidView``, ``ConfigError``) saying why;
no other exception escapes to the command line or a relay."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.errors import ConfigError, InvalidView
from fanout.publisher.config import parse_config
from fanout.views.text import parse

#: Pieces of the view syntaxes, so that generated text gets past the first character often.
VIEW_PIECES = [
    "box:", "sphere:", "sector:", "union:", "rel:", "sql:", "topic:", "path:",
    "SELECT ", "* ", "FROM ", "orders ", "WHERE ", "amount ", ">", "<", "=", " AND ", " OR ",
    "NOT ", "NULL", "IS ", "(", ")", "'", '"', ",", "1", "-2.5", "1e308", "nan", "inf",
    "+", "#", "/", "$share/g/", "a", ".all", "?", "f=", "delta", "[n]", ";", "|", " ", "\x00",
    "é", "\ud7ff",
]  # fmt: skip
TEXTS = st.one_of(
    st.text(max_size=80),
    st.lists(st.sampled_from(VIEW_PIECES), max_size=14).map("".join),
)
KINDS = st.sampled_from(["region", "sql", "topic", "path"])


@settings(max_examples=600)
@given(TEXTS, KINDS)
def test_a_view_text_is_parsed_or_refused_as_an_invalid_view(text: str, kind: str) -> None:
    try:
        parse(text, kind)
    except InvalidView as exc:
        assert str(exc)  # says why


TOML_PIECES = [
    "[datasets.a]\n", "[publisher]\n", "[datasets.a.source]\n", "key = ", "index = ",
    "columns = ", "source = ", "kind = ", '"space"', '"sql"', '"ingest"', '"files"',
    '"postgres"', '"simulation"', "{ id = \"long\", x = \"double\" }", '["x", "y"]', "1",
    "-1", "1e400", "nan", "true", '"', "'", "\n", "=", "[", "]", "{", "}", ",", "port = ",
    "log = ", '"sqlite:///tmp/x.db"', "cell_size = ", "rate = ", "agents = ",
]  # fmt: skip
TOMLS = st.one_of(
    st.text(max_size=120),
    st.lists(st.sampled_from(TOML_PIECES), max_size=24).map("".join),
)


@settings(max_examples=400)
@given(TOMLS)
def test_a_configuration_is_read_or_refused_as_a_config_error(text: str) -> None:
    try:
        parse_config(text)
    except ConfigError as exc:
        assert str(exc)
