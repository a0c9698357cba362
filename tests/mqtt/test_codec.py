"""The MQTT codec: every packet survives encode then decode, and malformed bytes are refused.

The oracle for "malformed" is the spec's rules written out here byte by byte (a fixed header's
reserved flags, a Remaining Length's form, a body's exact length), not the decoder's own code.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from fanout.mqtt import packets as p
from fanout.mqtt.decoding import decode, split
from fanout.mqtt.encoding import encode, varint

texts = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12
)
blobs = st.binary(max_size=40)
ids = st.integers(1, 65535)
versions = st.sampled_from([p.V311, p.V5])


def properties(allowed: list[int]) -> st.SearchStrategy[p.Properties]:
    """Valid 5.0 properties among ``allowed``: each at most once but user properties."""
    values = {
        p.BYTE: st.integers(0, 1),
        p.U16: st.integers(0, 65535),
        p.U32: st.integers(0, 2**32 - 1),
        p.VARINT: st.integers(1, p.MAX_VARINT),
        p.UTF8: texts,
        p.BINARY: blobs,
        p.PAIR: st.tuples(texts, texts),
    }

    def one(ident: int) -> st.SearchStrategy[tuple[int, object]]:
        return st.tuples(st.just(ident), values[p.PROPERTIES[ident][1]])

    singles = [i for i in allowed if i != 0x26]
    chosen = st.lists(st.sampled_from(singles), unique=True, max_size=3) if singles else st.just([])
    drawn = chosen.flatmap(lambda idents: st.tuples(*[one(i) for i in idents]))
    users = st.lists(one(0x26), max_size=2) if 0x26 in allowed else st.just([])
    return st.builds(lambda a, b: tuple(a) + tuple(b), drawn, users)


def props_for(version: int, allowed: list[int]) -> st.SearchStrategy[p.Properties]:
    return properties(allowed) if version == p.V5 else st.just(())


@st.composite
def packets(draw: st.DrawFn) -> tuple[p.Packet, int]:
    """A valid packet of either direction and the version it is written in."""
    v = draw(versions)
    v5 = v == p.V5
    kind = draw(st.sampled_from(list(range(11))))
    if kind == 0:
        will = draw(
            st.none()
            | st.builds(
                p.Will, texts, blobs, st.integers(0, 2), st.booleans(), props_for(v, [0x18, 0x26])
            )
        )
        username = draw(st.none() | texts)
        password = draw(st.none() | blobs) if (v5 or username is not None) else None
        packet: p.Packet = p.Connect(
            draw(texts),
            v,
            draw(st.booleans()),
            draw(st.integers(0, 65535)),
            will,
            username,
            password,
            draw(props_for(v, [0x11, 0x21, 0x27, 0x26])),
        )
    elif kind == 1:
        packet = p.ConnAck(
            draw(st.booleans()), draw(st.integers(0, 255)), draw(props_for(v, [0x12, 0x24, 0x27]))
        )
    elif kind == 2:
        qos = draw(st.integers(0, 2))
        packet = p.Publish(
            draw(texts),
            draw(blobs),
            qos,
            draw(st.booleans()),
            draw(st.booleans()) if qos else False,
            draw(ids) if qos else None,
            draw(props_for(v, [0x01, 0x02, 0x03, 0x0B, 0x26])),
        )
    elif kind == 3:
        code = draw(st.integers(0, 255)) if v5 else 0
        ack = draw(st.sampled_from([p.PubAck, p.PubRec, p.PubRel, p.PubComp]))
        packet = ack(draw(ids), code, draw(props_for(v, [0x1F, 0x26])) if code or v5 else ())
    elif kind == 4:
        options = st.integers(0, 2) | (
            st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(0, 2)).map(
                lambda t: t[0] | t[1] << 2 | t[2] << 4
            )
            if v5
            else st.nothing()
        )
        packet = p.Subscribe(
            draw(ids),
            tuple(draw(st.lists(st.tuples(texts, options), min_size=1, max_size=4))),
            draw(props_for(v, [0x0B, 0x26])),
        )
    elif kind == 5:
        codes = tuple(draw(st.lists(st.integers(0, 255), max_size=4)))
        packet = p.SubAck(draw(ids), codes, draw(props_for(v, [0x1F, 0x26])))
    elif kind == 6:
        filters = tuple(draw(st.lists(texts, min_size=1, max_size=4)))
        packet = p.Unsubscribe(draw(ids), filters, draw(props_for(v, [0x26])))
    elif kind == 7:
        codes = tuple(draw(st.lists(st.integers(0, 255), max_size=4))) if v5 else ()
        packet = p.UnsubAck(draw(ids), codes, draw(props_for(v, [0x1F, 0x26])))
    elif kind == 8:
        packet = p.PingReq()
    elif kind == 9:
        packet = p.PingResp()
    else:
        code = draw(st.integers(0, 255)) if v5 else 0
        packet = p.Disconnect(code, draw(props_for(v, [0x11, 0x1F, 0x26])))
    return packet, v


def roundtrip(data: bytes, version: int) -> p.Packet:
    found = split(data, len(data))
    assert found is not None
    first, body, taken = found
    assert taken == len(data)
    return decode(first, body, version)


@given(packets())
def test_every_packet_decodes_to_itself(case: tuple[p.Packet, int]) -> None:
    packet, version = case
    assert roundtrip(encode(packet, version), version) == packet


@given(packets(), st.integers(1, 10))
def test_a_packet_cut_short_is_not_whole_yet(case: tuple[p.Packet, int], cut: int) -> None:
    data = encode(*case)
    assume(cut < len(data))
    assert split(data[:-cut], len(data)) is None


@given(packets(), st.integers(0, 15))
def test_reserved_flags_are_malformed(case: tuple[p.Packet, int], flags: int) -> None:
    packet, version = case
    data = bytearray(encode(packet, version))
    kind = data[0] >> 4
    assume(kind != p.PUBLISH)
    fixed = 2 if kind in (p.SUBSCRIBE, p.UNSUBSCRIBE, p.PUBREL) else 0
    assume(flags != fixed)
    data[0] = kind << 4 | flags
    with pytest.raises(p.PacketError):
        roundtrip(bytes(data), version)


@given(packets(), st.integers(1, 4))
def test_a_body_shorter_than_its_fields_is_malformed(case: tuple[p.Packet, int], cut: int) -> None:
    """Remove bytes from the end of the body and say so in the Remaining Length."""
    packet, version = case
    data = encode(packet, version)
    first, body, _ = split(data, len(data)) or (0, b"", 0)
    # Packets whose last field runs to the end of the body may lose bytes and stay valid.
    assume(not isinstance(packet, (p.Publish, p.SubAck, p.UnsubAck, p.Disconnect, p.ConnAck)))
    acks = (p.PubAck, p.PubRec, p.PubRel, p.PubComp)
    assume(not isinstance(packet, acks) or version == p.V311)
    if isinstance(packet, (p.Subscribe, p.Unsubscribe)):
        cut = 1  # more may cut whole entries off a list, which leaves a valid packet
    assume(cut <= len(body))
    shorter = bytes([first]) + varint(len(body) - cut) + body[:-cut]
    with pytest.raises(p.PacketError):
        roundtrip(shorter, version)


@given(packets(), st.binary(min_size=1, max_size=3))
def test_bytes_past_a_packets_last_field_are_malformed(
    case: tuple[p.Packet, int], extra: bytes
) -> None:
    packet, version = case
    assume(isinstance(packet, (p.Connect, p.PingReq, p.PingResp, p.Unsubscribe)))
    data = encode(packet, version)
    first, body, _ = split(data, len(data)) or (0, b"", 0)
    longer = bytes([first]) + varint(len(body) + len(extra)) + body + extra
    with pytest.raises(p.PacketError):
        roundtrip(longer, version)


@given(st.binary(max_size=64), versions)
def test_any_bytes_decode_or_are_refused_with_a_reason_code(data: bytes, version: int) -> None:
    try:
        found = split(data, 1 << 20)
        if found is not None:
            decode(found[0], found[1], version)
    except p.PacketError as error:
        assert 0x80 <= error.code <= 0xA2


@given(st.integers(0, p.MAX_VARINT))
def test_remaining_lengths_round_trip_in_the_fewest_bytes(value: int) -> None:
    encoded = varint(value)
    expected = 1 + (value >= 128) + (value >= 128**2) + (value >= 128**3)
    assert len(encoded) == expected
    data = bytes([0xC0]) + encoded + bytes(value if value < 1000 else 0)
    if value < 1000:
        assert split(data, 1 << 20) == (0xC0, bytes(value), len(data))


def test_remaining_lengths_too_long_or_not_minimal_are_malformed() -> None:
    for bad in (b"\xc0\x80\x80\x80\x80\x01", b"\xc0\x80\x00", b"\xc0\xff\xff\x80\x00"):
        with pytest.raises(p.PacketError, match=r"4 bytes|fewest"):
            split(bad, 1 << 30)


def test_a_packet_over_the_limit_is_refused_as_too_large_before_it_arrives() -> None:
    header = bytes([0x30]) + varint(5000)
    with pytest.raises(p.PacketError) as error:
        split(header, 4096)
    assert error.value.code == p.PACKET_TOO_LARGE


V3, V5 = p.V311, p.V5


@pytest.mark.parametrize(
    ("data", "version", "code"),
    [
        (b"\x36\x05\x00\x01a\x00\x01", V3, p.MALFORMED_PACKET),  # QoS 3
        (b"\x38\x03\x00\x01a", V3, p.MALFORMED_PACKET),  # DUP at QoS 0
        (b"\x30\x04\x00\x02\xc3\x28", V3, p.MALFORMED_PACKET),  # ill-formed UTF-8 topic
        (b"\x30\x04\x00\x02a\x00", V3, p.MALFORMED_PACKET),  # U+0000 in the topic
        (b"\x32\x05\x00\x01a\x00\x00", V3, p.MALFORMED_PACKET),  # packet identifier 0
        (b"\x30\x08\x00\x01a\x04\x01\x00\x01\x00", V5, p.PROTOCOL_ERROR),  # a property twice
        (b"\x30\x09\x00\x01a\x05\x11\x00\x00\x00\x00", V5, p.PROTOCOL_ERROR),  # not PUBLISH's
        (b"\x82\x02\x00\x01", V3, p.PROTOCOL_ERROR),  # SUBSCRIBE without a filter
        (b"\x82\x06\x00\x01\x00\x01a\x03", V3, p.MALFORMED_PACKET),  # QoS 3 requested
        (b"\x82\x06\x00\x01\x00\x01a\x04", V3, p.MALFORMED_PACKET),  # No Local in 3.1.1
        (b"\x60\x02\x00\x01", V3, p.MALFORMED_PACKET),  # PUBREL without its flags 0010
        (b"\xf0\x00", V5, p.PROTOCOL_ERROR),  # AUTH: not spoken
    ],
)
def test_named_malformed_packets_get_their_reason_codes(
    data: bytes, version: int, code: int
) -> None:
    with pytest.raises(p.PacketError) as error:
        roundtrip(data, version)
    assert error.value.code == code


def test_a_connect_of_another_protocol_level_is_unsupported() -> None:
    data = encode(p.Connect("c", p.V311), p.V311).replace(b"MQTT\x04", b"MQTT\x03")
    with pytest.raises(p.PacketError) as error:
        roundtrip(data, p.V5)
    assert error.value.code == p.UNSUPPORTED_PROTOCOL_VERSION


@given(st.binary(max_size=12) | texts.map(str.encode), blobs, st.booleans(), versions)
def test_a_qos_0_publish_decodes_as_its_topic_bytes_say(
    raw: bytes, payload: bytes, retain: bool, version: int
) -> None:
    """The decoder's short way for the commonest PUBLISH (QoS 0, no properties), against the
    rules written out: a topic of well-formed UTF-8 without U+0000 (MQTT 1.5.4), the rest
    payload."""
    body = len(raw).to_bytes(2, "big") + raw + (b"\x00" if version == p.V5 else b"") + payload
    try:
        topic = raw.decode("utf-8")
        valid = "\x00" not in topic
    except UnicodeDecodeError:
        valid = False
    if not valid:
        with pytest.raises(p.PacketError):
            decode(0x30 | retain, body, version)
    else:
        assert decode(0x30 | retain, body, version) == p.Publish(topic, payload, 0, retain)
