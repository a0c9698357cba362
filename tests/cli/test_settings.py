"""``fanout relay``'s settings from ``fanout.toml``'s ``[relay]`` and ``FANOUT_RELAY_*`` variables
(``cli.settings``): flags over the environment over the file over defaults; unknown names and
wrong values refused, naming them; a real relay started from a file alone."""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fanout.cli.main import USAGE, _parser, main
from fanout.cli.settings import resolve, settings_of
from fanout.errors import ConfigError
from fanout.launch import Children
from fanout.testing.ports import free_port
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.wire.messages import Catalog

FILE = """\
[publisher]
port = 7700          # the publisher's table: not the relay's business

[relay]
port = 9001
name = "from-file"
mqtt_port = 1884
mqtt_route = ["plant/=plants", "fleet/=vehicles"]
mqtt_websocket = true
read_rate = 50
widen = "enclose"
"""


def resolved(argv: list[str], toml: Path | None, environ: dict[str, str]) -> argparse.Namespace:
    args = _parser().parse_args(["relay", *argv])
    return resolve(args.parser, args, "relay", toml, environ)


def test_flags_override_the_environment_which_overrides_the_file(tmp_path: Path) -> None:
    toml = tmp_path / "fanout.toml"
    toml.write_text(FILE)
    environ = {
        "FANOUT_RELAY_MQTT_PORT": "1885",
        "FANOUT_RELAY_NAME": "from-env",
        "FANOUT_RELAY_PORT": "9002",
        "FANOUT_RELAY_SERVE_RELAYS": "true",
        "FANOUT_RELAY_MQTT_LOGIN_RATE": "0.5",
        "FANOUT_TOKEN": "not a setting: another prefix",
    }
    # --port given its default value still wins: what was given counts, not what differs.
    args = resolved(["--name", "from-flag", "--port", "7701"], toml, environ)
    assert args.port == 7701 and args.name == "from-flag"
    assert args.mqtt_port == 1885 and args.serve_relays is True and args.mqtt_login_rate == 0.5
    assert args.mqtt_route == ["plant/=plants", "fleet/=vehicles"] and args.mqtt_websocket is True
    assert args.read_rate == 50.0 and type(args.read_rate) is float and args.widen == "enclose"
    assert args.mqtt_tls_cert is None and args.mqtt_lease == 3.0  # neither: the defaults
    assert resolved([], toml, {}).port == 9001
    # A repeatable flag given replaces the file's list; in the environment, a comma list.
    assert resolved(["--mqtt-route", "a/=b"], toml, {}).mqtt_route == ["a/=b"]
    environ = {"FANOUT_RELAY_MQTT_ROUTE": "x/=y, z/=w"}
    assert resolved([], toml, environ).mqtt_route == ["x/=y", "z/=w"]
    # Without a file the environment alone; paths become paths.
    args = resolved([], None, {"FANOUT_RELAY_MQTT_ACL_FILE": "/etc/fanout/acl"})
    assert args.mqtt_acl_file == Path("/etc/fanout/acl") and args.port == 7701


#: Integer settings with their defaults: where each comes from is drawn at random.
INTEGERS = {"port": 7701, "mqtt_peer_port": 0, "mqtt_login_burst": 5, "max_held": None}
#: Where a setting may be given: (on the command line, in the environment, in the file).
PLACES = st.tuples(*[st.one_of(st.none(), st.integers(1, 65535))] * 3)


@given(st.fixed_dictionaries(dict.fromkeys(INTEGERS, PLACES)))
def test_each_setting_comes_from_the_first_place_giving_it(
    placed: dict[str, tuple[int | None, int | None, int | None]],
) -> None:
    """Against the rule said plainly: the flag if given, else the variable, else the file, else
    the default; whatever the others say."""
    argv, environ, lines = [], {}, ["[relay]"]
    for key, (flag, variable, setting) in placed.items():
        if flag is not None:
            argv += [f"--{key.replace('_', '-')}", str(flag)]
        if variable is not None:
            environ[f"FANOUT_RELAY_{key.upper()}"] = str(variable)
        if setting is not None:
            lines.append(f"{key} = {setting}")
    args = _parser().parse_args(["relay", *argv])
    with tempfile.TemporaryDirectory() as directory:
        file = Path(directory) / "fanout.toml"
        file.write_text("\n".join(lines))
        resolve(args.parser, args, "relay", file, environ)
    for key, places in placed.items():
        expected = next((value for value in places if value is not None), INTEGERS[key])
        assert getattr(args, key) == expected, key


def test_every_relay_flag_is_a_setting_but_those_of_every_command() -> None:
    (relay,) = [a.choices["relay"] for a in _parser()._actions if a.dest == "command"]
    assert isinstance(relay, argparse.ArgumentParser)
    names = set(settings_of(relay))
    assert {"publisher", "mqtt_port", "mqtt_password_file", "auth_key_file", "registry"} <= names
    assert not names & {"help", "log_level", "log_format", "config"}


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("mqtt_prot = 1883", "relay.mqtt_prot: unknown setting"),
        ('port = "seven"', "relay.port: invalid int value 'seven'"),
        ("port = 1.5", "relay.port: invalid int value 1.5"),
        ("port = true", "relay.port: expected a value for --port, got True"),
        ('mqtt_websocket = "yes"', "relay.mqtt_websocket: expected true or false, got 'yes'"),
        ('widen = "wide"', "relay.widen: 'wide' is not one of tiles, margin, exact"),
        ('mqtt_redis = "redis-1"', "relay.mqtt_redis: invalid host_port value 'redis-1'"),
        ('mqtt_route = "a/=b"', "relay.mqtt_route: expected a list, got 'a/=b'"),
        ("mqtt_route = [1]", None),  # a number as text: a route it does not parse, said later
        ("relay = 1", "relay.relay: unknown setting"),
    ],
)
def test_a_wrong_key_or_value_in_the_file_is_refused_naming_it(
    tmp_path: Path, line: str, says: str | None
) -> None:
    toml = tmp_path / "fanout.toml"
    toml.write_text(f"[relay]\n{line}\n")
    if says is None:
        assert resolved([], toml, {}).mqtt_route == ["1"]
        return
    with pytest.raises(ConfigError) as refused:
        resolved([], toml, {})
    assert f"{toml}: {says}" in str(refused.value)


def test_a_wrong_variable_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"\$FANOUT_RELAY_MQTT_PROT: unknown setting"):
        resolved([], None, {"FANOUT_RELAY_MQTT_PROT": "1883"})
    with pytest.raises(ConfigError, match=r"\$FANOUT_RELAY_SERVE_RELAYS: expected true or false"):
        resolved([], None, {"FANOUT_RELAY_SERVE_RELAYS": "maybe"})
    with pytest.raises(ConfigError, match=r"\$FANOUT_RELAY_PORT: invalid int value 'x'"):
        resolved([], None, {"FANOUT_RELAY_PORT": "x"})


def test_the_command_says_what_is_wrong_and_exits_with_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    toml = tmp_path / "fanout.toml"
    toml.write_text("[relay]\nmqtt_prot = 1883\n")
    assert main(["relay", "--config", str(toml)]) == USAGE
    err = capsys.readouterr().err
    assert "relay.mqtt_prot: unknown setting" in err and "Traceback" not in err
    toml.write_text("[relay\n")
    assert main(["relay", "--config", str(toml)]) == USAGE
    assert "not valid TOML" in capsys.readouterr().err
    assert main(["relay", "--config", str(tmp_path / "missing.toml")]) == USAGE
    assert "cannot be read" in capsys.readouterr().err
    monkeypatch.setenv("FANOUT_RELAY_MQTT_RECEIVE_MAXIMUM", "0")  # typed, then checked
    assert main(["relay", "--port", "0", "--mqtt-port", "0"]) == USAGE
    assert "receive_maximum must be in [1, 65535], not 0" in capsys.readouterr().err


async def mosquitto(*args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 20)
    assert process.returncode == 0, err.decode()
    return out.decode()


async def test_a_real_relay_runs_from_a_file_alone(tmp_path: Path) -> None:
    mqtt_port = free_port()
    async with serving(ScriptedPublisher(Catalog([]))) as url, Children() as children:
        toml = tmp_path / "fanout.toml"
        toml.write_text(
            f'[relay]\npublisher = "{url}"\nport = 0\nname = "edge-1"\n'
            f"mqtt_port = {mqtt_port}\nmqtt_max_queued = 10\n"
        )
        relay = await children.start("relay", ["--config", str(toml)], tmp_path / "relay.log")
        port = str(mqtt_port)
        listening = asyncio.create_task(
            mosquitto("mosquitto_sub", "-p", port, "-t", "t/#", "-C", "1", "-W", "15", "-v")
        )
        for _ in range(50):  # until the subscriber is subscribed (it gets the retained one)
            await mosquitto("mosquitto_pub", "-p", port, "-t", "t/1", "-m", "hi", "-r")
            if listening.done():
                break
            await asyncio.sleep(0.2)
        assert (await listening).strip() == "t/1 hi"
        await relay.stop()


@pytest.mark.parametrize(
    ("doc", "start"),
    [("configuration.md", "# /etc/fanout/fanout.toml"), ("mqtt.md", "[relay]\npublisher")],
)
def test_the_documented_relay_sections_are_read_whole(tmp_path: Path, doc: str, start: str) -> None:
    """docs' complete ``[relay]`` examples of a secured broker are settings the relay takes."""
    text = (Path(__file__).parents[2] / "docs" / doc).read_text()
    begin = text.index(start)
    toml = tmp_path / "fanout.toml"
    toml.write_text(text[begin : text.index("```", begin)])
    args = resolved([], toml, {})
    assert args.mqtt_port == 8883 and args.mqtt_websocket is True
    assert args.mqtt_allow_anonymous is False and args.mqtt_route == ["fleet/=vehicles"]
    assert args.publisher.startswith("wss://") and args.token_file is not None


def test_settings_that_exclude_each_other_come_from_one_place(tmp_path: Path) -> None:
    """``--publisher`` and ``--upstream``: the place of highest precedence naming either
    decides; one place naming both is refused."""
    toml = tmp_path / "fanout.toml"
    toml.write_text('[relay]\nupstream = "ws://mid:7710"\n')
    args = resolved(["--publisher", "ws://p:7700"], toml, {})
    assert (args.publisher, args.upstream) == ("ws://p:7700", None)
    args = resolved([], toml, {"FANOUT_RELAY_PUBLISHER": "ws://q:7700"})
    assert (args.publisher, args.upstream) == ("ws://q:7700", None)
    assert resolved([], toml, {}).upstream == "ws://mid:7710"
    toml.write_text('[relay]\nupstream = "ws://mid:7710"\npublisher = "ws://p:7700"\n')
    with pytest.raises(ConfigError, match=r"\[relay\]: publisher and upstream exclude each"):
        resolved([], toml, {})
