"""``fanout datasets`` and ``fanout publish`` against a real publisher and relay, both checking
tokens: the catalog as a table and as JSON from either, rows published from arguments and from
stdin and then served, and every refusal (a row that is not JSON, an unknown dataset, a value of
the wrong type, a token without the role, a token of another key) a clear error and a non-zero
exit (issue 43 part 6)."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from fanout.auth import issue
from fanout.cli.main import FAILURE, USAGE, main
from fanout.client import SubscriptionError
from fanout.client import connect as subscribe_to
from fanout.client.publisher import open_reader
from fanout.launch import Child, Children
from fanout.testing.wait import eventually
from fanout.views.topic import parse as topic

pytestmark = [
    pytest.mark.integration,
    pytest.mark.second_lane,
    pytest.mark.asyncio(loop_scope="module"),
]

#: Spark picks published rows up on its next micro-batch.
NEXT_BATCH = {"timeout": 90.0, "every": 0.5}
SECRET = "a shared secret long enough for HS256: 32 bytes and more"

CONFIG = """
[datasets.sensors]
key = "topic"
schema = { topic = "string", value = "double" }
index = "topic"
source = "ingest"
"""


@dataclass
class Deployment:
    """A publisher and a relay checking tokens, and token files granting each role."""

    publisher: Child
    relay: Child
    tokens: Path

    def token(self, *roles: str, key: str = SECRET) -> str:
        """A token file granting ``roles`` (signed with ``key``)."""
        path = self.tokens / f"{'-'.join(roles)}-{len(key)}.jwt"
        path.write_text(issue("HS256", key, list(roles), subject="cli test"))
        return str(path)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def deployment(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Deployment]:
    where = tmp_path_factory.mktemp("deployment")
    (where / "fanout.toml").write_text(CONFIG)
    (where / "key").write_text(SECRET)
    (where / "relay.jwt").write_text(issue("HS256", SECRET, ["relay"], subject="relay"))
    checking = ["--auth-key-file", str(where / "key")]
    async with Children() as children:
        publisher = await children.start(
            "publisher",
            [
                "--config",
                str(where / "fanout.toml"),
                "--port",
                "0",
                "--state-dir",
                str(where / "state"),
                *checking,
            ],
            where / "publisher.log",
        )
        relay = await children.start(
            "relay",
            [
                "--publisher",
                publisher.url,
                "--port",
                "0",
                "--token-file",
                str(where / "relay.jwt"),
                *checking,
            ],
            where / "relay.log",
        )
        yield Deployment(publisher, relay, where)  # leaving the scope stops both


async def fanout(*argv: str) -> int:
    """Run the ``fanout`` command line (which runs its own event loop) beside this loop."""
    return await asyncio.to_thread(main, list(argv))


async def test_the_publishers_catalog_as_a_table_and_as_json(
    deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    reader = deployment.token("relay")
    url = deployment.publisher.url
    assert await fanout("datasets", "--publisher", url, "--token-file", reader) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["DATASET", "KIND", "KEY", "ROWS", "ROWS/S", "COLUMNS"]
    assert row.split()[:4] == ["sensors", "topic", "(topic)", "topic"]
    assert row.endswith("topic:str value:<f8")
    status = await fanout(
        "datasets", "--publisher", url, "--token-file", reader, "--json", "--sample", "0.2"
    )
    assert status == 0
    (sensors,) = json.loads(capsys.readouterr().out)["datasets"]
    assert {k: sensors[k] for k in ("name", "kind", "view", "key", "columns")} == {
        "name": "sensors",
        "kind": "topic",
        "view": "topic",
        "key": "topic",
        "columns": {"topic": "str", "value": "<f8"},
    }
    assert sensors["rows"] is None or sensors["rows"] >= 0
    assert isinstance(sensors["rate"], float)  # measured over --sample
    assert (
        await fanout(
            "datasets", "--publisher", url, "--token-file", reader, "--json", "--sample", "0"
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["datasets"][0]["rate"] is None


async def test_a_relays_catalog_says_the_rows_it_holds(
    deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    producer = deployment.token("subscriber", "producer")
    relay = deployment.relay.url
    row = '{"topic": "held/1", "value": 1.0}'
    assert await fanout("publish", "--relay", relay, "--token-file", producer, "sensors", row) == 0
    assert capsys.readouterr().out.startswith("published 1 row(s)")
    argv = ["datasets", "--relay", relay, "--token-file", deployment.token("subscriber")]
    async with subscribe_to(relay, token=_read(producer)) as subscriber:
        view = await subscriber.subscribe(topic("held/#"), dataset="sensors", rate=10)
        await eventually(lambda: view.rows, lambda rows: len(rows) == 1, **NEXT_BATCH)
        assert await fanout(*argv, "--json") == 0
        (sensors,) = json.loads(capsys.readouterr().out)["datasets"]
        assert sensors["name"] == "sensors" and sensors["kind"] == "topic"
        assert sensors["columns"] == {"topic": "str", "value": "<f8"}
        # A relay has no whole-dataset figures, only the rows it holds: its views' union.
        assert (sensors["rows"], sensors["rate"], sensors["held"]) == (None, None, 1)
        assert await fanout(*argv) == 0
    header, line = capsys.readouterr().out.splitlines()
    assert header.split() == ["DATASET", "KIND", "KEY", "HELD", "COLUMNS"]
    assert line.split() == ["sensors", "topic", "(topic)", "topic", "1", "topic:str", "value:<f8"]


async def test_rows_published_through_the_relay_are_served(
    deployment: Deployment, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    producer = deployment.token("subscriber", "producer")
    relay = deployment.relay.url
    rows = ['{"topic": "plant/1/temp", "value": 20.5}', '{"value": 21, "topic": "plant/2/temp"}']
    assert (
        await fanout("publish", "--relay", relay, "--token-file", producer, "sensors", *rows) == 0
    )
    assert capsys.readouterr().out.startswith("published 2 row(s) to sensors: ingest log offsets")
    lines = '{"topic": "plant/1/rpm", "value": 900}\n\n{"topic": "plant/3/temp", "value": 19.0}\n'
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    argv = ["publish", "--relay", relay, "--token-file", producer, "--json", "sensors"]
    assert await fanout(*argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["dataset"] == "sensors" and result["rows"] == 2
    assert result["last"] - result["first"] == 1
    async with open_reader(
        deployment.publisher.url, token=_read(deployment.token("relay"))
    ) as reader:
        await eventually(
            lambda: reader.read("sensors", topic("plant/+/temp")),
            lambda read: (
                sorted(zip(read[1]["topic"].tolist(), read[1]["value"].tolist(), strict=True))
                == [("plant/1/temp", 20.5), ("plant/2/temp", 21.0), ("plant/3/temp", 19.0)]
            ),
            retrying=(SubscriptionError,),  # "state is at no batch yet" before the first one
            **NEXT_BATCH,
        )


async def test_rows_published_to_the_publisher_itself(
    deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    producer = deployment.token("producer")
    argv = ["publish", "--publisher", deployment.publisher.url, "--token-file", producer]
    assert await fanout(*argv, "--json", "sensors", '{"topic": "plant/9/temp", "value": 1.5}') == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 1


@pytest.mark.parametrize(
    ("rows", "said"),
    [
        (['{"topic": "a", "value": 1.0}', "{'topic': 'b'}"], "argument 2: not JSON"),
        (["[1, 2]"], "argument 1: not a JSON object of columns"),
        (['{"topic": "a", "value": 1.0}', '{"topic": "b"}'], "argument 2: columns ['topic']"),
    ],
)
async def test_a_row_that_is_not_a_json_object_of_the_same_columns_is_a_usage_error(
    deployment: Deployment, capsys: pytest.CaptureFixture[str], rows: list[str], said: str
) -> None:
    producer = deployment.token("subscriber", "producer")
    argv = ["publish", "--relay", deployment.relay.url, "--token-file", producer, "sensors"]
    assert await fanout(*argv, *rows) == USAGE
    captured = capsys.readouterr()
    assert captured.err.startswith(f"fanout publish: {said}")
    assert captured.out == "" and "Traceback" not in captured.err  # nothing was published


async def test_a_malformed_line_on_stdin_stops_after_saying_what_went_first(
    deployment: Deployment, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    producer = deployment.token("subscriber", "producer")
    monkeypatch.setattr("sys.stdin", io.StringIO('{"topic": "s/1", "value": 1.0}\nnot json\n'))
    argv = ["publish", "--relay", deployment.relay.url, "--token-file", producer, "--batch", "1"]
    assert await fanout(*argv, "sensors") == USAGE
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "fanout publish: 1 row(s) accepted first",
        "fanout publish: line 2: not JSON (Expecting value: line 1 column 1 (char 0)): 'not json'",
    ]


@pytest.mark.parametrize(
    "refused",
    [
        ("nowhere", '{"topic": "a", "value": 1.0}', ("subscriber", "producer"), "unknown dataset"),
        ("sensors", '{"topic": "a", "value": "hot"}', ("subscriber", "producer"), "value"),
        ("sensors", '{"topic": "a", "value": 1.0}', ("subscriber",), "forbidden"),
    ],
)
async def test_a_refused_row_is_a_clear_failure(
    deployment: Deployment,
    capsys: pytest.CaptureFixture[str],
    refused: tuple[str, str, tuple[str, ...], str],
) -> None:
    dataset, row, roles, said = refused
    argv = ["publish", "--relay", deployment.relay.url, "--token-file", deployment.token(*roles)]
    assert await fanout(*argv, dataset, row) == FAILURE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("fanout publish: ") and said in captured.err
    assert "Traceback" not in captured.err


async def test_a_token_of_another_key_is_refused_by_relay_and_publisher(
    deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    forged = deployment.token("subscriber", "producer", "relay", key="x" * 40)
    for where, url in (
        ("--relay", deployment.relay.url),
        ("--publisher", deployment.publisher.url),
    ):
        assert await fanout("datasets", where, url, "--token-file", forged) == FAILURE
        err = capsys.readouterr().err
        assert err.startswith("fanout datasets: ") and "unauthorized" in err, err
        argv = [
            "publish",
            where,
            url,
            "--token-file",
            forged,
            "sensors",
            '{"topic": "a", "value": 1}',
        ]
        assert await fanout(*argv) == FAILURE
        err = capsys.readouterr().err
        assert err.startswith("fanout publish: ") and "unauthorized" in err, err


async def test_the_publishers_catalog_needs_a_relays_token(
    deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    subscriber = deployment.token("subscriber")
    argv = ["datasets", "--publisher", deployment.publisher.url, "--token-file", subscriber]
    assert await fanout(*argv) == FAILURE
    assert "forbidden" in capsys.readouterr().err


def _read(path: str) -> str:
    return Path(path).read_text()
