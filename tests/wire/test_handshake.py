"""The handshake and error rules of the accepting side (wire/handshake.py)."""

from __future__ import annotations

import msgspec
import pytest

from fanout.errors import Unauthorized
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.handshake import (
    MAX_BAD_FRAMES,
    AcceptingSession,
    HandshakeRefused,
    Phase,
    check_welcome,
)
from fanout.wire.messages import PROTOCOL_VERSION, Error, Hello, Subscribe, Welcome


def session() -> AcceptingSession:
    return AcceptingSession(codec.to_relay(), "test", frozenset({"subscriber"}))


def hello(version: int = PROTOCOL_VERSION, role: str = "subscriber") -> bytes:
    return codec.encode(Hello(version, role))  # type: ignore[arg-type]


def test_hello_is_answered_with_welcome_and_frames_flow() -> None:
    accepting = session()
    outcome = accepting.receive(hello())
    assert isinstance(outcome.reply, Welcome)
    assert accepting.phase is Phase.OPEN
    request = Subscribe(1, "agents", Box((0, 0), (1, 1)))
    assert accepting.receive(codec.encode(request)).deliver == request


def test_anything_before_hello_is_refused_and_closes() -> None:
    outcome = session().receive(codec.encode(Subscribe(1, "agents", Box((0, 0), (1, 1)))))
    assert isinstance(outcome.reply, Error)
    assert outcome.reply.code == "handshake"
    assert "expected hello first" in outcome.reply.message
    assert outcome.close


def test_another_protocol_version_is_refused() -> None:
    outcome = session().receive(hello(version=PROTOCOL_VERSION + 1))
    assert isinstance(outcome.reply, Error)
    assert "not supported" in outcome.reply.message
    assert outcome.close


def test_a_role_not_served_is_refused() -> None:
    outcome = session().receive(hello(role="relay"))
    assert isinstance(outcome.reply, Error)
    assert "role 'relay' is not served here" in outcome.reply.message


def test_a_bad_frame_after_the_handshake_gets_an_error_and_the_connection_stays() -> None:
    accepting = session()
    accepting.receive(hello())
    outcome = accepting.receive(b"\x93garbage")
    assert isinstance(outcome.reply, Error)
    assert outcome.reply.code == "protocol"
    assert not outcome.close
    assert accepting.receive(codec.encode(Subscribe(1, "agents", Box((0, 0), (1, 1))))).deliver


def test_a_second_hello_is_an_error() -> None:
    accepting = session()
    accepting.receive(hello())
    outcome = accepting.receive(hello())
    assert isinstance(outcome.reply, Error)
    assert "duplicate hello" in outcome.reply.message


def test_a_peer_sending_only_garbage_is_closed_eventually() -> None:
    accepting = session()
    accepting.receive(hello())
    outcomes = [accepting.receive(b"\xc1") for _ in range(MAX_BAD_FRAMES)]
    assert not any(o.close for o in outcomes[:-1])
    assert outcomes[-1].close
    assert accepting.phase is Phase.CLOSED


def test_check_welcome_turns_a_refusal_into_an_exception() -> None:
    with pytest.raises(HandshakeRefused, match="handshake: no") as refused:
        check_welcome(Error("handshake", "no"))
    assert refused.value.code == "handshake"
    assert check_welcome(Welcome(PROTOCOL_VERSION, "s", "x")).server == "s"


def test_a_hello_without_room_is_refused_as_unavailable_and_closes() -> None:
    full: list[str | None] = ["no room: try another"]
    accepting = AcceptingSession(
        codec.to_relay(), "test", frozenset({"subscriber"}), room=lambda: full[0]
    )
    outcome = accepting.receive(hello())
    assert outcome.close and outcome.reply == Error("unavailable", "no room: try another")
    assert accepting.phase is Phase.CLOSED and accepting.hello is None
    full[0] = None  # room again: the next connection is welcome
    fresh = AcceptingSession(
        codec.to_relay(), "test", frozenset({"subscriber"}), room=lambda: full[0]
    )
    assert isinstance(fresh.receive(hello()).reply, Welcome)


def test_a_subscribe_with_an_invalid_view_is_refused_as_that_subscription() -> None:
    accepting = session()
    accepting.receive(hello())
    bad = msgspec.msgpack.encode(
        {
            "type": "subscribe",
            "sub": 7,
            "dataset": "agents",
            "view": {"kind": "box", "lo": [5.0, 5.0], "hi": [1.0, 1.0]},
        }
    )
    outcome = accepting.receive(bad)
    assert isinstance(outcome.reply, Error)
    assert (outcome.reply.code, outcome.reply.ref) == ("protocol", 7)
    assert accepting.receive(b"\x93garbage").reply.ref is None  # type: ignore[union-attr]


def test_the_welcome_names_the_datasets_served_when_asked_at_the_hello() -> None:
    served: dict[str, str] = {}
    accepting = AcceptingSession(
        codec.to_relay(), "test", frozenset({"subscriber"}), datasets=lambda grant: served
    )
    served["orders"] = "sql"  # learnt after the session was made, before its hello
    outcome = accepting.receive(hello())
    assert isinstance(outcome.reply, Welcome)
    assert outcome.reply.datasets == {"orders": "sql"}
    assert session().receive(hello()).reply.datasets == {}  # type: ignore[union-attr]


class WelcomeBeforeDatasets(msgspec.Struct, tag="welcome", tag_field="type", frozen=True):
    """``Welcome`` as peers older than its ``datasets`` field decode it."""

    version: int
    server: str
    session: str


def test_welcome_with_datasets_and_without_decode_on_either_side() -> None:
    new = Welcome(PROTOCOL_VERSION, "relay", "s", {"orders": "sql", "shapes": "a-kind-to-come"})
    old = msgspec.msgpack.decode(codec.encode(new), type=WelcomeBeforeDatasets)
    assert (old.version, old.server, old.session) == (PROTOCOL_VERSION, "relay", "s")
    from_old = msgspec.msgpack.encode(WelcomeBeforeDatasets(PROTOCOL_VERSION, "relay", "s"))
    assert codec.to_subscriber().decode(from_old) == Welcome(PROTOCOL_VERSION, "relay", "s")
    assert codec.to_subscriber().decode(codec.encode(new)) == new
    assert b"datasets" not in codec.encode(Welcome(PROTOCOL_VERSION, "publisher", "s"))


def test_a_hello_whose_token_is_refused_closes_before_anything_is_read() -> None:
    from fanout.views import Box
    from fanout.wire.messages import Subscribe

    def authenticate(hello: Hello) -> str:
        if hello.token != "good":
            raise Unauthorized("unauthorized", "the token has expired")
        return "grant"

    accepting = AcceptingSession(
        codec.to_relay(), "test", frozenset({"subscriber"}), authenticate=authenticate
    )
    outcome = accepting.receive(codec.encode(Hello(PROTOCOL_VERSION, "subscriber", token="bad")))
    assert outcome.close and outcome.reply == Error("unauthorized", "the token has expired")
    assert accepting.hello is None and accepting.grant is None
    after = accepting.receive(codec.encode(Subscribe(1, "agents", Box((0, 0), (1, 1)))))
    assert after.close and after.deliver is None  # nothing after a refused hello is read
    welcomed = AcceptingSession(
        codec.to_relay(), "test", frozenset({"subscriber"}), authenticate=authenticate
    )
    outcome = welcomed.receive(codec.encode(Hello(PROTOCOL_VERSION, "subscriber", token="good")))
    assert isinstance(outcome.reply, Welcome) and welcomed.grant == "grant"
