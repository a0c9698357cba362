"""Who may log in to the MQTT port (``mqtt.access``), the password file (``mqtt.passwords``), the
ACL file (``mqtt.acl``) and the failed-login limit, as units: verdicts on CONNECT packets."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fanout.auth import AuthConfig, Verifier, issue
from fanout.errors import ConfigError
from fanout.mqtt import packets as p
from fanout.mqtt.access import Access, Admitted, LoginLimiter, Refused
from fanout.mqtt.acl import parse_acl
from fanout.mqtt.passwords import hash_password, read_passwords, write_passwords
from fanout.mqtt.rights import Rights
from fanout.mqtt.setup import describe, mqtt_access
from fanout.relay.config import Mqtt, RelayConfig, Upstream

SECRET = "s" * 40
ACL = """
# anonymous clients
topic read public/#
user ana
topic readwrite plant/a/#
topic deny plant/a/secret
pattern write clients/%u/#
"""


@pytest.fixture(scope="module")
def passwords() -> dict[str, str]:
    return {"ana": hash_password("right")}  # hashed once: ~0.1 s each


def connect(user: str | None = None, password: str | None = None, **kw: object) -> p.Connect:
    secret = None if password is None else password.encode()
    return p.Connect("c1", p.V5, username=user, password=secret, **kw)  # type: ignore[arg-type]


def token(roles: list[str], **kw: object) -> str:
    return issue("HS256", SECRET, roles, **kw)  # type: ignore[arg-type]


def test_a_password_user_gets_the_acl_rights(passwords: dict[str, str]) -> None:
    access = Access(passwords=passwords, acl=parse_acl(ACL))
    verdict = access.check(connect("ana", "right"), time.time())
    assert verdict == Admitted(
        Rights(("plant/a/#",), ("plant/a/#", "clients/ana/#"), ("plant/a/secret",)), "user 'ana'"
    )
    for user, password in [("ana", "wrong"), ("bob", "right"), ("ana", "")]:
        refused = access.check(connect(user, password), time.time())
        assert isinstance(refused, Refused) and refused.code == 0x86
        assert refused.return_code(p.V311) == 4


def test_anonymous_clients_only_when_allowed(passwords: dict[str, str]) -> None:
    refused = Access(passwords=passwords).check(connect(), time.time())
    assert isinstance(refused, Refused) and (refused.code, refused.reason) == (0x87, "anonymous")
    assert refused.return_code(p.V311) == 5
    allowed = Access(passwords=passwords, acl=parse_acl(ACL), anonymous=True)
    assert allowed.check(connect(), time.time()) == Admitted(
        Rights(("public/#",), (), ()), "anonymous"
    )
    assert Access().open and not Access(anonymous=False).open


def test_tokens_as_the_password() -> None:
    access = Access(verifier=Verifier(AuthConfig("HS256", SECRET)), datasets=["sensors"])
    rules = {"sensors": ["plant/a/#"], "other": ["x/#"]}
    verdict = access.check(connect("anyone", token(["subscriber"], rules=rules)), time.time())
    assert isinstance(verdict, Admitted) and verdict.rights == Rights(("plant/a/#",), ())
    assert verdict.lifetime is not None and 3590 < verdict.lifetime <= 3600
    both = access.check(connect(None, token(["subscriber", "producer"])), time.time())
    assert both == Admitted(None, "a token", both.lifetime)  # type: ignore[union-attr]
    admin = access.check(connect(None, token(["admin"], rules=rules)), time.time())
    assert isinstance(admin, Admitted) and admin.rights == Rights(("$SYS/#",), ())
    reader = access.check(connect(None, token(["admin", "subscriber"], rules=rules)), time.time())
    assert isinstance(reader, Admitted) and reader.rights == Rights(("plant/a/#", "$SYS/#"), ())
    cases = {
        "expired": (token(["subscriber"], ttl=-10), 0x86, "the token has expired"),
        "malformed": ("a.b.c", 0x86, "the token is not a valid JWT"),
        "not a token": ("password", 0x86, "bad user name or password"),
        "no role": (token(["relay"]), 0x87, "none of the subscriber, producer and admin roles"),
        "no topic": (token(["subscriber"], rules={"other": ["x"]}), 0x87, "grant no MQTT"),
        "bad rule": (token(["subscriber"], rules={"sensors": ["a/#/b"]}), 0x87, "rules"),
    }
    for name, (password, code, why) in cases.items():
        refused = access.check(connect("u", password), time.time())
        assert isinstance(refused, Refused) and refused.code == code, name
        assert why in refused.why, (name, refused.why)


def test_enhanced_authentication_and_a_forbidden_will_are_refused(
    passwords: dict[str, str],
) -> None:
    access = Access(passwords=passwords, acl=parse_acl(ACL))
    method = connect("ana", "right", properties=((0x15, "SCRAM-SHA-1"),))
    assert access.check(method, 0).code == 0x8C  # type: ignore[union-attr]
    will = connect("ana", "right", will=p.Will("elsewhere", b"gone"))
    assert access.check(will, 0).reason == "will_denied"  # type: ignore[union-attr]
    ok = connect("ana", "right", will=p.Will("clients/ana/status", b"gone"))
    assert isinstance(access.check(ok, 0), Admitted)


def test_the_login_limiter_refuses_an_address_past_its_burst_until_it_refills() -> None:
    limiter = LoginLimiter(burst=3, rate=0.5)
    assert [limiter.attempt("10.0.0.1", 0.0) for _ in range(4)] == [True, True, True, False]
    assert limiter.attempt("10.0.0.2", 0.0)  # another address is not held back
    assert not limiter.attempt("10.0.0.1", 1.0)
    assert limiter.attempt("10.0.0.1", 2.0)  # one refilled
    limiter.succeeded("10.0.0.2", 0.0)  # a success gives its attempt back: full, forgotten
    assert "10.0.0.2" not in limiter._buckets
    small = LoginLimiter(burst=1, rate=1.0, addresses=2)
    for n in range(5):
        small.attempt(f"a{n}", 0.0)
    assert len(small._buckets) == 2  # bounded


def test_acl_lines_and_patterns() -> None:
    acl = parse_acl("pattern read devices/%c/#\npattern %u/#\nuser ana\ntopic x")
    assert acl.rights("ana", "d1") == Rights(("x", "devices/d1/#", "ana/#"), ("x", "ana/#"), ())
    assert acl.rights(None, "d+") == Rights((), (), ())  # no widening by a wildcard id
    for bad in ["topic read a/#/b", "subscribe x", "topic read $share/g/x"]:
        with pytest.raises(ConfigError, match="line 1"):
            parse_acl(bad)


def test_the_password_file_round_trips(tmp_path: Path, passwords: dict[str, str]) -> None:
    path = tmp_path / "passwd"
    write_passwords(path, passwords)
    assert read_passwords(path) == passwords
    assert path.stat().st_mode & 0o777 == 0o600
    path.write_text("ana:$7$101$mosquitto\n")
    with pytest.raises(ConfigError, match="line 1"):
        read_passwords(path)


def test_the_relay_config_says_who_logs_in(tmp_path: Path, passwords: dict[str, str]) -> None:
    tokens = AuthConfig("HS256", SECRET)
    with pytest.raises(ConfigError, match="would refuse every MQTT client"):
        mqtt_access(RelayConfig(Upstream("ws://x"), mqtt=Mqtt(0, allow_anonymous=False)), [])
    open_port = mqtt_access(RelayConfig(Upstream("ws://x"), mqtt=Mqtt(0)), [])
    assert open_port.open and "admits every client" in describe(open_port)
    required = mqtt_access(RelayConfig(Upstream("ws://x"), auth=tokens, mqtt=Mqtt(0)), ["d"])
    assert not required.anonymous and required.datasets == ("d",)
    assert "anonymous clients refused (the relay requires tokens" in describe(required)
    write_passwords(tmp_path / "passwd", passwords)
    both = Mqtt(0, password_file=tmp_path / "passwd", allow_anonymous=True)
    told = mqtt_access(RelayConfig(Upstream("ws://x"), auth=tokens, mqtt=both), [])
    assert told.anonymous and told.datasets == ("mqtt",)
    assert "though the relay's other ports require tokens" in describe(told)
    with pytest.raises(ConfigError, match="login limits"):
        Mqtt(0, login_burst=0)
