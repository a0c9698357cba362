"""When a connection admitted with a token is to end (``fanout.expiry``): the token's ``exp``
plus the verifier's leeway, on the event loop's clock."""

from __future__ import annotations

import asyncio
import time

from fanout.auth import AuthConfig, Grant, Verifier, issue
from fanout.expiry import EXPIRED, deadline, expired

SECRET = "expiry-unit-secret-" + "u" * 32


async def test_a_connection_ends_at_its_tokens_exp_plus_the_leeway() -> None:
    loop = asyncio.get_running_loop()
    verifier = Verifier(AuthConfig("HS256", SECRET, leeway=2.0))
    grant = verifier.verify(issue("HS256", SECRET, ["subscriber"], ttl=60), "subscriber")
    assert grant.leeway == 2.0
    ends = deadline(grant, loop)
    assert ends is not None
    wall = time.time() + (ends - loop.time())  # the deadline on the wall clock
    assert abs(wall - (grant.expires + 2.0)) < 1.0


async def test_without_a_token_nothing_ends_and_a_past_exp_ends_now() -> None:
    loop = asyncio.get_running_loop()
    assert deadline(None, loop) is None
    past = Grant("ana", frozenset({"subscriber"}), None, time.time() - 100)
    ends = deadline(past, loop)
    assert ends is not None and ends <= loop.time()
    assert (expired().code, expired().message, expired().ref) == ("unauthorized", EXPIRED, None)
    assert EXPIRED == "the token has expired"
