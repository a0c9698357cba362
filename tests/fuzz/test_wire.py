"""Fuzzing the wire's entry points, sans I/O: every decoder and the accepting session take any
bytes (raw, or valid frames mutated) and answer with a ``ProtocolError`` or an ``Error`` frame,
never another exception (a relay's or publisher's connection handler would crash on it)."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.errors import ProtocolError
from fanout.testing.hostile import HELLO, VALID
from fanout.wire import codec
from fanout.wire.handshake import MAX_BAD_FRAMES, AcceptingSession, Phase, _reference
from fanout.wire.messages import (
    Error,
)

DECODERS = [codec.to_relay(), codec.to_publisher(), codec.to_subscriber(), codec.from_publisher()]

EDITS = st.lists(
    st.tuples(
        st.sampled_from(["set", "delete", "insert"]),
        st.integers(0, 10**6),
        st.binary(min_size=1, max_size=3),
    ),
    min_size=1,
    max_size=6,
)


@st.composite
def messages(draw: st.DrawFn) -> bytes | str:
    """A WebSocket message a hostile peer might send: a valid frame with a few bytes edited,
    raw bytes, or text."""
    kind = draw(st.sampled_from(["mutated", "mutated", "raw", "text"]))
    if kind == "raw":
        return draw(st.binary(max_size=256))
    if kind == "text":
        return draw(st.text(max_size=64))
    data = bytearray(draw(st.sampled_from(VALID)))
    for edit, anywhere, some in draw(EDITS):
        at = anywhere % (len(data) + 1)
        if edit == "set" and at < len(data):
            data[at] = some[0]
        elif edit == "delete":
            del data[at : at + len(some)]
        else:
            data[at:at] = some
    return bytes(data)


@settings(max_examples=400)
@given(messages())
def test_every_decoder_refuses_bad_input_with_a_protocol_error(message: bytes | str) -> None:
    for decoder in DECODERS:
        with contextlib.suppress(ProtocolError):  # refused: fine; any other exception fails
            decoder.decode(message)


@settings(max_examples=400)
@given(messages())
def test_the_reference_of_a_bad_frame_is_read_or_none(message: bytes | str) -> None:
    found = _reference(message)
    assert found is None or isinstance(found, int)


@settings(max_examples=200)
@given(st.lists(messages(), min_size=1, max_size=2 * MAX_BAD_FRAMES), st.booleans())
def test_a_session_answers_every_message_and_closes_only_a_persistent_offender(
    received: list[bytes | str], greeted: bool
) -> None:
    session: AcceptingSession[object] = AcceptingSession(
        codec.to_relay(), "relay", frozenset({"subscriber"})
    )
    if greeted:
        assert session.receive(HELLO).reply is not None
        assert session.phase is Phase.OPEN
    bad_in_a_row = 0
    for message in received:
        open_before = session.phase is Phase.OPEN
        outcome = session.receive(message)
        if outcome.deliver is not None:
            assert open_before and outcome.reply is None and not outcome.close
            bad_in_a_row = 0
            continue
        if session.phase is Phase.CLOSED and not open_before:
            # before the handshake, or already closed: refused and closed
            assert outcome.close
            if outcome.reply is not None:
                assert isinstance(outcome.reply, Error) and outcome.reply.code
            break
        if outcome.reply is not None and isinstance(outcome.reply, Error):
            assert outcome.reply.code
            bad_in_a_row += 1
        # only MAX_BAD_FRAMES bad frames in a row close an open connection
        assert outcome.close == (bad_in_a_row >= MAX_BAD_FRAMES), (bad_in_a_row, outcome)
        if outcome.close:
            break
