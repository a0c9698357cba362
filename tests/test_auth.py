"""Tokens: valid ones grant their roles and rules; every bad one is refused with a reason."""

from __future__ import annotations

import time

import jwt
import pytest

from fanout.auth import AuthConfig, Verifier, issue
from fanout.errors import ConfigError, Unauthorized
from fanout.testing.certs import rsa_pair

SECRET = "s" * 40
OTHER_SECRET = "t" * 40


@pytest.fixture(scope="module")
def rsa() -> tuple[str, str]:
    return rsa_pair()


def refused(verifier: Verifier, token: str | None, role: str = "subscriber") -> Unauthorized:
    with pytest.raises(Unauthorized) as error:
        verifier.verify(token, role)
    assert not token or token not in error.value.message, "a refusal never echoes the token"
    return error.value


def test_a_valid_hs256_token_grants_its_roles_and_rules() -> None:
    token = issue("HS256", SECRET, ["subscriber"], subject="ana", rules={"agents": "box:0,0,9,9"})
    grant = Verifier(AuthConfig("HS256", SECRET)).verify(token, "subscriber")
    assert grant.subject == "ana" and grant.roles == {"subscriber"}
    assert grant.rules == {"agents": ("box:0,0,9,9",)}
    assert grant.expires > time.time()


def test_rs256_tokens_verify_with_the_public_key_only(rsa: tuple[str, str]) -> None:
    private, public = rsa
    token = issue("RS256", private, ["relay"], audience="fanout")
    verifier = Verifier(AuthConfig("RS256", public, audience="fanout"))
    assert verifier.verify(token, "relay").roles == {"relay"}
    assert verifier.verify(token, "reader").roles == {"relay"}  # a reader reads as a relay does


def test_forged_expired_and_misaddressed_tokens_are_refused(rsa: tuple[str, str]) -> None:
    verifier = Verifier(AuthConfig("HS256", SECRET, audience="fanout"))
    cases = {
        None: "a token is required",
        "": "a token is required",
        "not.a.jwt": "not a valid JWT",
        issue(
            "HS256", OTHER_SECRET, ["subscriber"], audience="fanout"
        ): "signature does not verify",
        issue("HS256", SECRET, ["subscriber"], audience="fanout", ttl=-60): "expired",
        issue("HS256", SECRET, ["subscriber"], audience="elsewhere"): "another audience",
        issue("HS256", SECRET, ["subscriber"]): "no 'aud' claim",
        issue("RS256", rsa[0], ["subscriber"], audience="fanout"): "not signed with HS256",
        jwt.encode({"roles": ["subscriber"], "aud": "fanout"}, SECRET): "no 'exp' claim",
        jwt.encode({"roles": "subscriber", "aud": "fanout", "exp": 2**40}, SECRET): "'roles'",
        jwt.encode({"roles": [], "aud": "fanout", "exp": 2**40, "rules": [1]}, SECRET): "rules",
    }
    for token, says in cases.items():
        error = refused(verifier, token)
        assert error.code == "unauthorized" and says in error.message, (token, error.message)


def test_a_token_without_the_role_is_forbidden() -> None:
    verifier = Verifier(AuthConfig("HS256", SECRET))
    error = refused(verifier, issue("HS256", SECRET, ["producer"]), "subscriber")
    assert error.code == "forbidden"
    assert "does not grant role 'subscriber' (it grants: producer)" in error.message
    assert refused(verifier, issue("HS256", SECRET, ["subscriber"]), "reader").code == "forbidden"


def test_an_rs256_public_key_cannot_be_used_as_an_hs256_secret(rsa: tuple[str, str]) -> None:
    """Algorithm confusion: a token signed with HS256 using the public key as the secret."""
    _, public = rsa
    verifier = Verifier(AuthConfig("RS256", public))
    forged = jwt.encode({"roles": ["relay"], "exp": 2**40}, "x" * 40, algorithm="HS256")
    assert "not signed with RS256" in refused(verifier, forged, "relay").message


def test_bad_configurations_are_refused_when_made(rsa: tuple[str, str]) -> None:
    with pytest.raises(ConfigError, match="at least 32 bytes"):
        AuthConfig("HS256", "short")
    with pytest.raises(ConfigError, match="public key in PEM"):
        AuthConfig("RS256", rsa[0])  # the private key: never handed to relays
    with pytest.raises(ConfigError, match="one of HS256, RS256"):
        AuthConfig("none", SECRET)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown role 'root'"):
        issue("HS256", SECRET, ["root"])


def test_fanout_token_signs_what_the_relay_verifies(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from fanout.cli.main import main

    key = tmp_path / "secret"
    key.write_text(SECRET)
    argv = ["token", "--key-file", str(key), "--role", "subscriber", "--subject", "ana"]
    assert main([*argv, "--rule", "agents=box:0,0,9,9", "--rule", "agents=box:20,20,30,30"]) == 0
    grant = Verifier(AuthConfig("HS256", SECRET)).verify(
        capsys.readouterr().out.strip(), "subscriber"
    )
    assert grant.subject == "ana"
    assert grant.rules == {"agents": ("box:0,0,9,9", "box:20,20,30,30")}
    assert main([*argv, "--rule", "no-equals-sign"]) == 2
    assert "expected DATASET=VIEW" in capsys.readouterr().err


def test_fanout_explain_shows_the_effective_view_under_rules(capsys) -> None:  # type: ignore[no-untyped-def]
    from fanout.cli.main import main

    argv = ["explain", "--dataset", "agents", "--view", "box:0,0,100,100"]
    assert main([*argv, "--rule", "agents=sphere:0,0,50"]) == 0
    out = capsys.readouterr().out
    assert "EFFECTIVE VIEW under 1 rule(s): box:0,0,100,100&sphere:0,0,50" in out
    assert "residual (1 primitive" in out and "box:0,0,50,50" in out
    assert main([*argv, "--rule", "agents=box:200,200,300,300"]) == 1
    assert "refused (forbidden)" in capsys.readouterr().out


def test_fanout_explain_shows_a_filter_meeting_two_rules_as_any_of_two(capsys) -> None:  # type: ignore[no-untyped-def]
    from fanout.cli.main import main

    argv = ["explain", "--dataset", "t", "--kind", "topic", "--view", "plant/+/temp"]
    assert main([*argv, "--rule", "t=plant/1/#", "--rule", "t=plant/2/#"]) == 0
    out = capsys.readouterr().out
    assert "EFFECTIVE VIEW under 2 rule(s): plant/1/temp | plant/2/temp" in out
    assert "residual (2 primitives" in out
