"""The test vectors of ``spec/vectors`` against the real decoder and a real relay: every valid
frame decodes to its stated meaning and encodes back to its bytes; a newer peer's frames decode
with unknown fields ignored and defaults filled in, and a relay serves them; every malformed one
is refused as stated (a relay's answer over a real WebSocket for frames sent to a relay, and the
connection left open where it says so); regenerating ``spec/`` changes no byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from fanout.client.core import ClientCore
from fanout.client.viewstate import Asked
from fanout.errors import ProtocolError
from fanout.testing.catalog import catalog
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.relays import running_relay
from fanout.testing.vectors import (
    DIRECTIONS,
    SPEC,
    UNIONS,
    plain,
    rows_of,
    spec_files,
    whole,
)
from fanout.views import Box
from fanout.wire import codec
from fanout.wire.handshake import check_welcome
from fanout.wire.messages import (
    PROTOCOL_VERSION,
    Error,
    Hello,
    Subscribed,
    Unsubscribe,
    Welcome,
)

VECTORS = SPEC / "vectors"


def _load(name: str) -> list[dict[str, Any]]:
    vectors: list[dict[str, Any]] = json.loads((VECTORS / name).read_text())["vectors"]
    return vectors


def _cases(prefix: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (direction, vector)
        for direction in DIRECTIONS
        if (VECTORS / f"{prefix}{direction}.json").exists()
        for vector in _load(f"{prefix}{direction}.json")
    ]


def test_regenerating_the_spec_changes_nothing() -> None:
    """``python -m fanout.testing.vectors`` has been run since the frames last changed."""
    files = spec_files()
    on_disk = {str(path.relative_to(SPEC)) for path in SPEC.rglob("*.json")}
    assert on_disk == set(files), "run: python -m fanout.testing.vectors"
    for name, text in files.items():
        assert (SPEC / name).read_text() == text, f"spec/{name} is stale: regenerate it"


def test_the_schema_names_every_frame() -> None:
    schema = json.loads((SPEC / "schema.json").read_text())
    tags = {
        definition["properties"]["type"]["enum"][0]
        for definition in schema["$defs"].values()
        if "type" in definition.get("properties", {})
    }
    assert tags >= {"hello", "subscribe", "push", "batch", "publish", "error", "dataset_state"}
    assert "Binary" in schema["$defs"]
    for direction, vector in _cases("") + _cases("compatible_"):
        (name,) = [name for name, named in UNIONS.items() if named == direction]
        union = schema["$defs"][name]
        assert vector["hex"] and plain_type(vector) in union["discriminator"]["mapping"]


def plain_type(vector: dict[str, Any]) -> str:
    tag: str = msgspec.msgpack.decode(bytes.fromhex(vector["hex"]))["type"]
    return tag


@pytest.mark.parametrize(
    ("direction", "vector"),
    _cases("compatible_"),
    ids=lambda v: v["name"] if isinstance(v, dict) else v,
)
def test_a_newer_peers_frame_decodes_to_its_whole_meaning(
    direction: str, vector: dict[str, Any]
) -> None:
    frame = codec.Decoder(DIRECTIONS[direction]).decode(bytes.fromhex(vector["hex"]))
    assert whole(frame) == vector["frame"]


@pytest.mark.parametrize(
    ("direction", "vector"),
    _cases(""),
    ids=lambda v: v["name"] if isinstance(v, dict) else v,
)
def test_a_valid_vector_decodes_to_its_meaning(direction: str, vector: dict[str, Any]) -> None:
    data = bytes.fromhex(vector["hex"])
    frame = codec.Decoder(DIRECTIONS[direction]).decode(data)
    assert plain(msgspec.msgpack.decode(data)) == vector["decoded"]
    assert rows_of(frame) == vector.get("rows", {})
    assert codec.encode(frame) == data


def _refused(data: bytes, context: dict[str, Any]) -> str:
    """How the Python subscriber takes a frame from its relay, holding subscription 1 (keyed by
    ``context["key"]``, default ``id``): the error's code, or "" if it takes it."""
    core = ClientCore()
    request = core.subscribe(Asked("agents", Box((0, 0), (1, 1))))
    core.receive(Subscribed(request.sub, context.get("key", "id"), ["id", "x"]), 0.0)
    try:
        frame = codec.to_subscriber().decode(data)
        if isinstance(frame, Welcome):
            check_welcome(frame)  # what the client's shell does with the first frame
        else:
            core.receive(frame, 0.0)
    except ProtocolError:
        return "protocol"
    return ""


def test_the_subscriber_takes_the_valid_pushes_it_refuses_malformed_ones_by() -> None:
    """The check above is not refusing everything: the valid pushes pass it."""
    takes = {v["name"]: v for v in _load("to_subscriber.json")}
    for name in ("push", "push_delta", "no_update"):
        assert _refused(bytes.fromhex(takes[name]["hex"]), {}) == "", name


@pytest.mark.parametrize(
    "vector", _load("malformed_to_subscriber.json"), ids=lambda vector: vector["name"]
)
def test_a_subscriber_refuses_a_malformed_vector(vector: dict[str, Any]) -> None:
    assert (
        _refused(bytes.fromhex(vector["hex"]), vector.get("context", {}))
        == vector["expect"]["refuse"]
    )


async def _answer(url: str, vector: dict[str, Any]) -> tuple[Error, int | None]:
    """Send the vector to a relay; its answer, and the close code if it closed (else None,
    once a valid frame after it was answered too)."""
    async with connect(url) as websocket:
        if vector["after_hello"]:
            await websocket.send(codec.encode(Hello(PROTOCOL_VERSION, "subscriber")))
            await websocket.recv()
        await websocket.send(bytes.fromhex(vector["hex"]))
        answer = codec.to_subscriber().decode(await websocket.recv())
        assert isinstance(answer, Error), answer
        try:
            await websocket.send(codec.encode(Unsubscribe(99)))
            after = codec.to_subscriber().decode(await websocket.recv())
        except ConnectionClosed as closed:
            assert closed.rcvd is not None
            return answer, closed.rcvd.code
        assert isinstance(after, Error) and after.code == "unknown_subscription", after
        return answer, None


async def test_a_relay_answers_every_malformed_vector_as_stated() -> None:
    vectors = _load("malformed_to_relay.json")
    async with (
        serving(ScriptedPublisher(catalog())) as upstream,
        running_relay(upstream) as (
            relay,
            url,
        ),
    ):
        for vector in vectors:
            answer, closed = await _answer(url, vector)
            want = vector["expect"]
            got = {"error": {"code": answer.code, "ref": answer.ref}, "close": closed}
            assert got == want, f"{vector['name']}: {answer.message}"
        assert relay.core.stats()["subscriptions"] == 0  # nothing was changed


async def test_a_relay_serves_a_newer_peers_frames() -> None:
    vectors = _load("compatible_to_relay.json")
    async with (
        serving(ScriptedPublisher(catalog())) as upstream,
        running_relay(upstream) as (
            _,
            url,
        ),
    ):
        for vector in vectors:
            data = bytes.fromhex(vector["hex"])
            async with connect(url) as websocket:
                decoder = codec.to_subscriber()
                if vector["frame"]["type"] == "hello":
                    await websocket.send(data)
                    assert type(decoder.decode(await websocket.recv())).__name__ == "Welcome"
                    continue
                await websocket.send(codec.encode(Hello(PROTOCOL_VERSION, "subscriber")))
                await websocket.recv()
                await websocket.send(data)
                answer = decoder.decode(await websocket.recv())
                assert answer == Subscribed(vector["frame"]["sub"], "id", ["id", "x", "y"]), answer


def test_every_direction_has_vectors() -> None:
    names = {path.name for path in Path(VECTORS).glob("*.json")}
    assert {f"{direction}.json" for direction in DIRECTIONS} <= names
