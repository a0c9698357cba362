"""The HTTP API's pure side: requests read, refused with a clear status, frames as JSON events."""

from __future__ import annotations

import datetime
import decimal
import json
import math
import urllib.parse

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.http.api import (
    MOVE_RETRY_MS,
    PARAMETERS,
    EventStream,
    HttpError,
    datasets_json,
    decode_token,
    encode_token,
    parse_subscribe,
    same_request_at,
)
from fanout.views import Box
from fanout.wire.columns import decode_columns, encode_columns, from_values
from fanout.wire.messages import DatasetInfo, Error, NoUpdate, Push, Subscribed
from fanout.wire.options import Resume

DATASETS = {"agents": "space", "orders": "sql"}


def test_a_request_becomes_the_subscription_it_names() -> None:
    request = parse_subscribe(
        "dataset=agents&view=box:0,0,10,10&mode=every&rate=5&columns=x,y", {}, DATASETS
    )
    subscribe = request.subscribe
    assert (subscribe.dataset, subscribe.view, subscribe.mode) == (
        "agents",
        Box((0, 0), (10, 10)),
        "every",
    )
    assert subscribe.rate == 5.0
    assert subscribe.transform is not None and subscribe.transform.columns == ["x", "y"]
    assert request.format == "ndjson"
    assert (
        parse_subscribe(
            "dataset=agents&view=box:0,0,1,1", {"Accept": "text/event-stream"}, DATASETS
        ).format
        == "sse"
    )
    sql = parse_subscribe("dataset=orders&view=SELECT * FROM orders WHERE amount > 5", {}, DATASETS)
    assert "amount" in str(sql.subscribe.view)


@pytest.mark.parametrize(
    ("query", "status", "says"),
    [
        ("", 400, "'dataset' is required"),
        ("dataset=agents", 400, "'view' is required"),
        ("dataset=nope&view=box:0,0,1,1", 404, "unknown dataset 'nope' (known: agents, orders)"),
        ("dataset=agents&view=box:0,0,1", 400, "view:"),
        ("dataset=agents&view=box:0,0,1,1&mode=all", 400, "mode must be 'latest' or 'every'"),
        ("dataset=agents&view=box:0,0,1,1&rate=fast", 400, "rate must be a number, not 'fast'"),
        ("dataset=agents&view=box:0,0,1,1&rate=nan", 400, "rate must be finite"),
        ("dataset=agents&view=box:0,0,1,1&priority=1.5", 400, "priority must be an integer"),
        ("dataset=agents&view=box:0,0,1,1&colour=red", 400, "unknown parameter 'colour'"),
        ("dataset=agents&dataset=orders&view=box:0,0,1,1", 400, "'dataset' given twice"),
        ("dataset=agents&view=box:0,0,1,1&format=xml", 400, "format must be 'ndjson' or 'sse'"),
        (
            "dataset=agents&view=box:0,0,1,1&mode=every&token=!!",
            400,
            "resume token does not decode",
        ),
        ("dataset=agents&view=box:0,0,1,1&token=abc", 400, "for mode=every only"),
        ("dataset=orders&view=SELECT nope FROM", 400, "view:"),
    ],
)
def test_bad_requests_are_refused_with_a_status_and_a_reason(
    query: str, status: int, says: str
) -> None:
    with pytest.raises(HttpError) as refused:
        parse_subscribe(query, {}, DATASETS)
    assert refused.value.status == status
    assert says in refused.value.message
    body = json.loads(refused.value.body())
    assert body == {"error": refused.value.code, "message": refused.value.message}


def test_the_last_event_id_header_resumes_like_a_token() -> None:
    token = encode_token(Resume(3, 41, encode_columns({"id": np.array([1, 2], np.int64)})))
    request = parse_subscribe(
        "dataset=agents&view=box:0,0,1,1&mode=every", {"Last-Event-ID": token}, DATASETS
    )
    assert request.subscribe.resume is not None
    assert (request.subscribe.resume.epoch, request.subscribe.resume.seq) == (3, 41)


def test_the_last_event_id_header_wins_over_a_token_in_the_url() -> None:
    """An EventSource reconnecting to a URL holding a token sends its newer one as a header."""
    old = encode_token(Resume(3, 41, encode_columns({"id": np.array([1], np.int64)})))
    new = encode_token(Resume(3, 57, encode_columns({"id": np.array([2], np.int64)})))
    query = f"dataset=agents&view=box:0,0,1,1&mode=every&token={old}"
    resumed = parse_subscribe(query, {"last-event-id": new}, DATASETS).subscribe.resume
    assert resumed is not None and resumed.seq == 57
    alone = parse_subscribe(query, {}, DATASETS).subscribe.resume
    assert alone is not None and alone.seq == 41


@given(
    st.integers(0, 2**62),
    st.integers(-1, 2**62),
    st.one_of(
        st.lists(st.integers(-(2**63), 2**63 - 1), unique=True),
        st.lists(st.text(), unique=True),
    ),
)
def test_tokens_read_back_as_written(epoch: int, seq: int, keys: list) -> None:
    dtype = np.int64 if all(isinstance(k, int) for k in keys) else object
    resume = Resume(epoch, seq, encode_columns({"k": np.array(keys, dtype=dtype)}))
    back = decode_token(encode_token(resume))
    assert (back.epoch, back.seq) == (epoch, seq)
    assert decode_columns(back.keys)["k"].tolist() == keys


def push(seq: int, *, full: bool, entered: dict, left: list[int]) -> Push:
    return Push(
        1,
        epoch=7,
        seq=seq,
        tick=seq * 10,
        tick_time=1.5,
        full=full,
        entered=encode_columns(entered),
        updated=encode_columns({}),
        left=encode_columns({"id": np.array(left, np.int64)}),
    )


def test_events_are_strict_json_and_every_mode_tokens_hold_the_keys() -> None:
    stream = EventStream("ndjson", "every")
    lines = [
        stream.event(Subscribed(1, "id", ["id", "v"])),
        stream.event(
            push(
                4,
                full=True,
                entered={"id": np.array([1, 2, 3]), "v": np.array([0.5, math.nan, math.inf])},
                left=[],
            )
        ),
        stream.event(
            push(5, full=False, entered={"id": np.array([9]), "v": np.array([1.0])}, left=[2])
        ),
        stream.event(NoUpdate(1, 7, 6, 60)),
    ]
    events = [json.loads(line) for line in lines]  # strict: Python's reader takes no NaN here
    assert all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in lines)
    assert b"NaN" not in b"".join(lines) and b"Infinity" not in b"".join(lines)
    assert events[0] == {"type": "subscribed", "key": "id", "columns": ["id", "v"]}
    assert events[1]["entered"] == [{"id": 1, "v": 0.5}, {"id": 2, "v": None}, {"id": 3, "v": None}]
    assert events[2]["left"] == [2]
    tokens = [decode_token(event["token"]) for event in events[1:]]
    assert [(t.seq, decode_columns(t.keys)["id"].tolist()) for t in tokens] == [
        (4, [1, 2, 3]),
        (5, [1, 3, 9]),
        (6, [1, 3, 9]),
    ]


def test_bytes_are_base64_and_null_is_null() -> None:
    stream = EventStream("ndjson", "latest")
    stream.event(Subscribed(1, "id", ["id", "b"]))
    blobs = from_values([b"\x00\xff", None, b""])
    line = stream.event(
        push(1, full=True, entered={"id": np.array([1, 2, 3]), "b": blobs}, left=[])
    )
    assert json.loads(line)["entered"] == [
        {"id": 1, "b": "AP8="},  # base64 (RFC 4648, padded)
        {"id": 2, "b": None},
        {"id": 3, "b": ""},
    ]


def test_timestamps_are_utc_with_their_offset_and_decimals_and_dates_exact() -> None:
    stream = EventStream("ndjson", "latest")
    stream.event(Subscribed(1, "id", ["id", "at", "day", "price"]))
    at = from_values([datetime.datetime(2026, 11, 29, 5, 0, 0, 250_000, datetime.UTC), None])
    day = np.array(["2026-11-29", "2026-01-02"], dtype="datetime64[D]")
    price = from_values([decimal.Decimal("1.10"), None])
    entered = {"id": np.array([1, 2]), "at": at, "day": day, "price": price}
    line = stream.event(push(1, full=True, entered=entered, left=[]))
    rows = json.loads(line)["entered"]
    assert [row["at"] for row in rows] == ["2026-11-29T05:00:00.250000Z", None]
    assert [row["day"] for row in rows] == ["2026-11-29", "2026-01-02"]
    assert [row["price"] for row in rows] == ["1.10", None]


def test_sse_events_carry_the_token_as_their_id() -> None:
    stream = EventStream("sse", "every")
    stream.event(Subscribed(1, "id", ["id"]))
    text = stream.event(push(1, full=True, entered={"id": np.array([5])}, left=[])).decode()
    head, data = text.rstrip("\n").split("\ndata: ")
    lines = head.split("\n")
    assert lines[0].startswith("id: ") and lines[1] == "event: push"
    assert decode_token(lines[0][4:]).seq == 1
    assert json.loads(data)["entered"] == [{"id": 5}]
    assert text.endswith("\n\n")


def test_an_error_ends_the_stream_but_a_resync_does_not() -> None:
    stream = EventStream("ndjson", "every")
    stream.event(Error("resync", "start again", ref=1))
    assert not stream.ended
    event = json.loads(stream.event(Error("entity_not_held", "gone", ref=1)))
    assert event == {"type": "error", "error": "entity_not_held", "message": "gone"}
    assert stream.ended


def test_the_datasets_are_described_with_their_view_language() -> None:
    info = DatasetInfo("agents", "id", {"id": "<i8", "x": "<f8"}, "space", ["x", "y"])
    assert json.loads(datasets_json([info], {"agents": 12, "other": 3}))["datasets"] == [
        {
            "name": "agents",
            "key": "id",
            "columns": {"id": "<i8", "x": "<f8"},
            "index": "space",
            "index_columns": ["x", "y"],
            "view": "region",
            "rows_held": 12,
        }
    ]


PATH = "/v1/subscribe?dataset=agents&view=box%3A0%2C0%2C1%2C1&mode=every&token=OLD&format=sse"


def test_a_moved_stream_ends_saying_where_to_go_and_the_token_to_resume_with() -> None:
    stream = EventStream("ndjson", "every", path=PATH)
    stream.event(Subscribed(1, "id", ["id"]))
    pushed = json.loads(stream.event(push(4, full=True, entered={"id": np.array([5])}, left=[])))
    line = stream.event(Error("redirect", "cell:0,0 moved", ref=1, location="ws://10.0.0.2:7702"))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {
        "type": "moved",
        "location": "http://10.0.0.2:7702/v1/subscribe?dataset=agents"
        "&view=box%3A0%2C0%2C1%2C1&mode=every&format=sse",
        "token": pushed["token"],
        "message": "cell:0,0 moved",
    }
    assert stream.ended


def test_a_moved_sse_stream_sets_a_short_retry_and_keeps_the_last_event_id() -> None:
    stream = EventStream("sse", "every", path=PATH)
    stream.event(Subscribed(1, "id", ["id"]))
    stream.event(push(4, full=True, entered={"id": np.array([5])}, left=[]))
    text = stream.event(Error("redirect", "moved", ref=1, location="wss://b:7702")).decode()
    head, data = text.rstrip("\n").split("\ndata: ")
    # no id: field, so the EventSource's last event id stays the push's token
    assert head.split("\n") == [f"retry: {MOVE_RETRY_MS}", "event: moved"]
    assert json.loads(data)["location"].startswith("https://b:7702/v1/subscribe?")
    assert stream.ended


def test_a_moved_latest_stream_has_no_token_and_one_moved_before_a_push_has_its_own() -> None:
    latest = EventStream("ndjson", "latest", path="/v1/subscribe?dataset=agents&view=x")
    moved = json.loads(latest.event(Error("redirect", "m", ref=1, location="ws://b:1")))
    assert "token" not in moved
    assert moved["location"] == "http://b:1/v1/subscribe?dataset=agents&view=x"
    resumed = Resume(3, 41, encode_columns({"id": np.array([1, 2], np.int64)}))
    early = EventStream("ndjson", "every", resumed, path=PATH)
    token = json.loads(early.event(Error("redirect", "m", ref=1, location="ws://b:1")))["token"]
    assert (decode_token(token).seq, decode_columns(decode_token(token).keys)["id"].tolist()) == (
        41,
        [1, 2],
    )


def test_a_redirect_without_a_location_is_an_error_that_ends_the_stream() -> None:
    stream = EventStream("ndjson", "every", path=PATH)
    event = json.loads(stream.event(Error("redirect", "no owner", ref=1)))
    assert event == {"type": "error", "error": "redirect", "message": "no owner"}
    assert stream.ended


@given(
    st.lists(st.tuples(st.sampled_from(sorted(PARAMETERS)), st.text(max_size=12)), max_size=8),
    st.sampled_from(["ws", "wss", "http", "https"]),
    st.booleans(),
)
def test_the_same_request_at_another_relay_keeps_its_parameters(
    pairs: list[tuple[str, str]], scheme: str, without_token: bool
) -> None:
    query = urllib.parse.urlencode(pairs)
    path = "/v1/subscribe" + (f"?{query}" if query else "")
    moved = same_request_at(f"{scheme}://b.example:7702", path, without_token=without_token)
    there = urllib.parse.urlsplit(moved)
    assert there.scheme == {"ws": "http", "wss": "https"}.get(scheme, scheme)
    assert (there.netloc, there.path) == ("b.example:7702", "/v1/subscribe")
    # The oracle: the parameters as parsed, the token's dropped when asked.
    kept = [(n, v) for n, v in pairs if not (without_token and n == "token")]
    assert urllib.parse.parse_qsl(there.query, keep_blank_values=True) == kept
