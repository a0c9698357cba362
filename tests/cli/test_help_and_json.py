"""The command line's help and machine-readable output: no help section titled twice, every
command that prints results takes ``--json`` and prints one strict JSON object, and the new
commands' usage errors are caught before anything is sent (issue 43 part 6)."""

from __future__ import annotations

import argparse
import io
import json
from collections import Counter
from pathlib import Path

import pytest

from fanout.cli.main import FAILURE, USAGE, _parser, main
from fanout.cli.publish import batches
from fanout.errors import ConfigError

#: The commands that print results, each with a --json (subscribe's: one object per update).
PRINTING = ["subscribe", "explain", "datasets", "publish", "token", "demo"]


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_no_command_titles_a_help_section_twice() -> None:
    for name, parser in [("fanout", _parser()), *_subcommands().items()]:
        titles = Counter(group.title for group in parser._action_groups)
        assert [title for title, n in titles.items() if n > 1] == [], name
        help_text = parser.format_help()
        headings = Counter(line for line in help_text.splitlines() if line.endswith(":"))
        assert [line for line, n in headings.items() if n > 1 and not line[0].isspace()] == []


def test_the_relays_security_section_has_its_server_and_client_flags() -> None:
    (security,) = [g for g in _subcommands()["relay"]._action_groups if g.title == "security"]
    flags = {flag for action in security._group_actions for flag in action.option_strings}
    assert {"--auth-key-file", "--tls-cert", "--token-file", "--tls-ca"} <= flags


@pytest.mark.parametrize("command", PRINTING)
def test_every_command_that_prints_results_takes_json(command: str) -> None:
    assert "--json" in _subcommands()[command].format_help()


def test_top_level_help_lists_the_operators_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "datasets" in out and "publish" in out


def test_explain_json_says_coverage_and_residual(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--view", "box:0,0,10,10", "--have", "box:0,0,5,10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "kind": "region",
        "view": "box:0,0,10,10",
        "have": ["box:0,0,5,10"],
        "covered": False,
        "residual": ["box:5,0,10,10"],
        "residual_share": 0.5,
        "residual_exact": True,
    }


def test_explain_json_of_a_topic_view_under_rules(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["explain", "--dataset", "s", "--kind", "topic", "--view", "plant/#", "--json"]
    assert main([*argv, "--have", "plant/#"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["covered"] is True and said["residual"] == [] and said["residual_share"] is None
    assert main([*argv, "--rule", "s=plant/1/#"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["effective_view"] == "plant/1/#" and said["rules"] == 1
    assert main([*argv, "--rule", "other=x/#"]) == FAILURE
    assert json.loads(capsys.readouterr().out)["refused"]["code"] == "forbidden"


def test_token_json_says_what_it_grants(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "key"
    key.write_text("a shared secret long enough for HS256: 32 bytes and more")
    argv = ["token", "--key-file", str(key), "--role", "producer", "--rule", "s=a/#", "--json"]
    assert main([*argv, "--ttl", "60"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["roles"] == ["producer"] and said["rules"] == {"s": ["a/#"]}
    assert said["token"].count(".") == 2 and isinstance(said["expires"], int)


def test_datasets_needs_a_relay_or_a_publisher(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["datasets"])
    assert exit_.value.code == USAGE
    assert "one of the arguments --relay --publisher is required" in capsys.readouterr().err


def test_datasets_from_a_relay_not_there_fails_cleanly(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["datasets", "--relay", "ws://127.0.0.1:1"]) == FAILURE
    err = capsys.readouterr().err
    assert err.startswith("fanout datasets: cannot reach the relay at ws://127.0.0.1:1")


def test_a_bad_row_argument_is_refused_before_connecting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Nothing listens on port 1: a connection attempted first would fail with exit 1.
    argv = ["publish", "--relay", "ws://127.0.0.1:1", "sensors", '{"a": 1}', "{oops"]
    assert main(argv) == USAGE
    assert capsys.readouterr().err.startswith("fanout publish: argument 2: not JSON")


def test_no_rows_on_stdin_publishes_nothing_and_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("\n\n"))
    # Nothing listens on port 1: a connection attempted would fail with exit 1.
    assert main(["publish", "--relay", "ws://127.0.0.1:1", "sensors"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "no rows given: nothing published\n"


def test_rows_are_batched_in_the_first_rows_column_order() -> None:
    texts = ['{"k": 1, "v": 2}', '{"v": 3, "k": 4}', '{"k": 5, "v": null}']
    assert list(batches(texts, "line", 2)) == [
        [{"k": 1, "v": 2}, {"k": 4, "v": 3}],
        [{"k": 5, "v": None}],
    ]
    with pytest.raises(ConfigError, match="line 2: columns"):
        list(batches(['{"k": 1}', '{"k": 2, "v": 3}'], "line", 10))
