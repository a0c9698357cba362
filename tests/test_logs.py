"""``--log-format json``: each record one JSON object on one line, from the formatter alone and
from real ``fanout relay`` and ``fanout subscribe`` processes' stderr."""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fanout.cli.main import _parser
from fanout.launch import running
from fanout.logs import JVM_JSON, JsonFormatter, configure
from fanout.testing.catalog import AGENTS
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.wait import eventually
from fanout.wire.messages import Catalog

FIELDS = {"time", "level", "logger", "message"}


def record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    return logging.getLogger("fanout.test").makeRecord(
        "fanout.test", logging.WARNING, __file__, 1, message, args, None, extra=extra
    )


def test_a_record_is_one_line_of_json_with_its_fields_and_extras() -> None:
    line = JsonFormatter().format(
        record("two\nlines: %d", 2, relay="r1", when=Path("/x"), level="mine")
    )
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["message"] == "two\nlines: 2"
    assert (entry["level"], entry["logger"]) == ("WARNING", "fanout.test")
    assert entry["time"].endswith("+00:00") and "T" in entry["time"]
    assert entry["relay"] == "r1"
    assert entry["when"] == "/x"  # not JSON: written as its str
    assert entry["extra_level"] == "mine"  # an extra named like a field keeps its value
    assert "exception" not in entry


def test_an_exception_is_its_traceback_in_one_field() -> None:
    try:
        raise ValueError("bad row")
    except ValueError:
        failed = logging.getLogger("fanout.test").makeRecord(
            "fanout.test", logging.ERROR, __file__, 1, "failed", (), sys.exc_info()
        )
    entry = json.loads(JsonFormatter().format(failed))
    assert entry["message"] == "failed"
    assert entry["exception"].startswith("Traceback (most recent call last):")
    assert entry["exception"].endswith("ValueError: bad row")


def test_json_logs_name_the_jvm_configuration_unless_one_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Spark's JVM, started later by this process, inherits it (tests/integration/
    test_monitoring.py shows its records as JSON)."""
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # configure replaces these
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", root.level)
    monkeypatch.delenv("LOG4J_CONFIGURATION_FILE", raising=False)
    configure("info", "json")
    assert os.environ["LOG4J_CONFIGURATION_FILE"] == str(JVM_JSON)
    assert "JsonTemplateLayout" in JVM_JSON.read_text()
    monkeypatch.setenv("LOG4J_CONFIGURATION_FILE", "/etc/mine.xml")
    configure("info", "json")
    assert os.environ["LOG4J_CONFIGURATION_FILE"] == "/etc/mine.xml"


def test_every_command_takes_log_format() -> None:
    """Read from the parser itself, so that a command added later is held to it too."""
    (commands,) = [
        action for action in _parser()._actions if isinstance(action, argparse._SubParsersAction)
    ]
    assert len(commands.choices) >= 7
    for name, command in commands.choices.items():
        options = {option for action in command._actions for option in action.option_strings}
        assert {"--log-level", "--log-format"} <= options, name


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log format 'xml'"):
        configure("info", "xml")


async def test_a_relay_run_with_log_format_json_writes_only_json_lines(tmp_path: Path) -> None:
    log = tmp_path / "relay.log"
    async with serving(ScriptedPublisher(Catalog([AGENTS]))) as url:
        args = ["--publisher", url, "--port", "0", "--log-level", "info", "--log-format", "json"]
        async with running("relay", args, log):
            await eventually(log.read_text, in_thread=True, timeout=30, what="a log line")
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert entries and all(set(entry) >= FIELDS for entry in entries)
    assert {entry["level"] for entry in entries} <= {"DEBUG", "INFO", "WARNING", "ERROR"}
    assert any(entry["logger"].startswith("fanout.") for entry in entries)


def test_a_command_that_fails_says_why_in_one_json_line() -> None:
    """``fanout subscribe`` to a relay not there: its last word is a record like the others.
    (Its notes on moving to the next relay, before, are the command's own printed lines.)"""
    command = ["subscribe", "--relay", "ws://127.0.0.1:9", "--box", "0,0,1,1"]
    result = subprocess.run(
        [sys.executable, "-m", "fanout", *command, "--log-format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    last = json.loads(result.stderr.splitlines()[-1])
    assert (last["level"], last["logger"], last["command"]) == ("ERROR", "fanout.cli", "subscribe")
    assert last["message"].startswith("fanout subscribe: ")


def test_an_exception_nothing_caught_is_a_critical_record() -> None:
    code = "from fanout import logs; logs.configure('info', 'json'); raise RuntimeError('boom')"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    entry = json.loads(line)
    assert (entry["level"], entry["logger"], entry["message"]) == ("CRITICAL", "fanout", "crashed")
    assert entry["exception"].endswith("RuntimeError: boom")
