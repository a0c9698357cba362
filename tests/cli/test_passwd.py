"""``fanout passwd``: the MQTT password file managed as ``mosquitto_passwd`` does: add and
update (prompted twice, from standard input, or ``-b``), delete (``-D``), start anew (``-c``);
what goes wrong is said and exits 2."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from fanout.cli.main import USAGE, main
from fanout.mqtt.passwords import check_password, read_passwords


def test_add_update_delete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "passwd"
    assert main(["passwd", "-b", str(path), "ana", "first"]) == 0
    monkeypatch.setattr("sys.stdin", io.StringIO("second\n"))
    assert main(["passwd", "--password-stdin", str(path), "bob", "--log-level", "error"]) == 0
    typed = iter(["third", "third"])
    monkeypatch.setattr("getpass.getpass", lambda prompt: next(typed))
    assert main(["passwd", str(path), "ana"]) == 0  # prompted twice: updated
    users = read_passwords(path)
    assert sorted(users) == ["ana", "bob"]
    assert check_password(users["ana"], "third") and not check_password(users["ana"], "first")
    assert check_password(users["bob"], "second")
    assert main(["passwd", "-D", str(path), "bob"]) == 0
    assert sorted(read_passwords(path)) == ["ana"]
    assert main(["passwd", "-c", "-b", str(path), "cy", "x"]) == 0
    assert sorted(read_passwords(path)) == ["cy"]


def test_mistakes_are_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "passwd"
    typed = iter(["one", "two"])
    monkeypatch.setattr("getpass.getpass", lambda prompt: next(typed))
    cases = {
        "the passwords do not match": ["passwd", str(path), "ana"],
        "is not in": ["passwd", "-D", str(path), "nobody"],
        "without ':'": ["passwd", "-b", str(path), "a:b", "x"],
        "with -b, and only then": ["passwd", str(path), "ana", "loose"],
    }
    for said, argv in cases.items():
        assert main(argv) == USAGE, argv
        assert said in capsys.readouterr().err
    assert not path.exists()


def test_fanout_passwd_as_a_process(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    run = [sys.executable, "-m", "fanout", "passwd", "--password-stdin", str(path), "ana"]
    subprocess.run(run, input="secret\n", text=True, check=True, timeout=60)
    assert check_password(read_passwords(path)["ana"], "secret")


def test_it_explains_itself(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["passwd", "--help"])
    assert exit.value.code == 0
    assert "mosquitto_passwd" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "passwd" in capsys.readouterr().out
