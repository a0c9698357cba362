"""Who may connect to the relay's MQTT port, and with which topic rights (docs/security.md, "MQTT").

A CONNECT waits in the broker (``Authenticate``) while :func:`login` checks its credentials off
the event loop (a password hash costs ~0.1 s of CPU); the broker then admits it with its
``Rights`` or refuses it with the verdict's code (3.1.1: 4 for 0x86, 5 for 0x87 and 0x8C, 3 for
0x9F). Rules (the table in docs/security.md says each in full):

1. An Authentication Method (5.0 enhanced authentication) is refused 0x8C.
2. Anonymous: admitted only if allowed (by default when nothing checks credentials), else 0x87.
3. A password-file user: its password must match (else 0x86), rights from the ACL file.
4. Else, with token keys, the password is a token: invalid or expired 0x86, no role or topic 0x87;
   ``subscriber`` reads, ``producer`` writes within the token's rules; ``admin`` reads ``$SYS``.
5. A will whose topic the client may not write is refused 0x87.
6. Failed logins are limited per address (``LoginLimiter``): past a burst, 0x9F unchecked.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fanout.auth import Grant, Verifier
from fanout.errors import InvalidView, Unauthorized
from fanout.mqtt import packets as p
from fanout.mqtt.acl import Acl
from fanout.mqtt.passwords import check_password, hash_password
from fanout.mqtt.rights import Rights, check_filters

BAD_USER_NAME_OR_PASSWORD = 0x86
NOT_AUTHORIZED = 0x87
BAD_AUTHENTICATION_METHOD = 0x8C
CONNECTION_RATE_EXCEEDED = 0x9F
#: 3.1.1's CONNACK return code for each 5.0 reason code of a refused login.
V311_CODES = {
    BAD_USER_NAME_OR_PASSWORD: 4,
    NOT_AUTHORIZED: 5,
    BAD_AUTHENTICATION_METHOD: 5,
    CONNECTION_RATE_EXCEEDED: 3,
}
#: What a token's ``admin`` role lets an MQTT client read besides its rules (rule 4).
SYS_TOPICS = "$SYS/#"
#: The token rules' key for a relay that keeps MQTT topics in no dataset (rule 4).
MQTT_RULES = "mqtt"


@dataclass(frozen=True)
class Admitted:
    """A login accepted: ``rights`` (None: every topic), ``who`` for logs, and ``lifetime``:
    seconds its credentials stay valid (a token's ``exp``; None: for ever)."""

    rights: Rights | None
    who: str
    lifetime: float | None = None


@dataclass(frozen=True)
class Refused:
    """A login refused with 5.0 reason ``code``; ``reason`` names it in counters, ``why``
    tells the client (5.0 Reason String) and the log."""

    code: int
    reason: str
    why: str

    def return_code(self, version: int) -> int:
        """The CONNACK code for a client of ``version``."""
        return self.code if version == p.V5 else V311_CODES[self.code]


Verdict = Admitted | Refused
BAD_CREDENTIALS = Refused(BAD_USER_NAME_OR_PASSWORD, "bad_password", "bad user name or password")


class Access:
    """The MQTT port's credentials: password file, ACL, token keys, anonymous (rules 1-5)."""

    def __init__(
        self,
        *,
        passwords: Mapping[str, str] | None = None,
        acl: Acl | None = None,
        verifier: Verifier | None = None,
        anonymous: bool | None = None,
        datasets: Sequence[str] = (),
    ) -> None:
        """``anonymous`` None: allowed only when neither ``passwords`` nor ``verifier`` is
        given; ``datasets``: where MQTT topics are kept (their token rules apply)."""
        self.passwords, self.acl, self.verifier = passwords, acl, verifier
        checked = passwords is not None or verifier is not None
        self.anonymous = not checked if anonymous is None else anonymous
        self.datasets = tuple(datasets) or (MQTT_RULES,)

    @property
    def open(self) -> bool:
        """Whether it admits every client to every topic: no check to make at all."""
        return (
            self.anonymous and self.passwords is None and self.verifier is None and self.acl is None
        )

    def check(self, connect: p.Connect, now: float) -> Verdict:
        """The verdict on ``connect``'s credentials at ``now`` (seconds since the epoch); may
        take ~0.1 s of CPU (run it in a thread)."""
        if p.prop(connect.properties, 0x15) is not None:
            return Refused(
                BAD_AUTHENTICATION_METHOD,
                "bad_auth_method",
                "enhanced authentication is not supported: send a user name and password",
            )
        verdict = self._credentials(connect, now)
        if isinstance(verdict, Refused) or verdict.rights is None:
            return verdict
        if verdict.rights.nothing:
            return Refused(NOT_AUTHORIZED, "no_topics", "your credentials grant no MQTT topic")
        will = connect.will
        if will is not None and not verdict.rights.may_write(will.topic):
            return Refused(
                NOT_AUTHORIZED, "will_denied", f"you may not publish your will to {will.topic!r}"
            )
        return verdict

    def _credentials(self, connect: p.Connect, now: float) -> Verdict:
        user, password = connect.username, connect.password
        checkable = self.passwords is not None or self.verifier is not None
        if (user is None and password is None) or not checkable:
            if not self.anonymous:
                return Refused(
                    NOT_AUTHORIZED,
                    "anonymous",
                    "anonymous clients are not allowed: log in with a user name and password,"
                    " or a token as the password",
                )
            rights = None if self.acl is None else self.acl.rights(None, connect.client_id)
            return Admitted(rights, "anonymous")
        text = (password or b"").decode("utf-8", "replace")
        if self.passwords is not None and user is not None and user in self.passwords:
            if not check_password(self.passwords[user], text):
                return BAD_CREDENTIALS
            rights = None if self.acl is None else self.acl.rights(user, connect.client_id)
            return Admitted(rights, f"user {user!r}")
        if self.verifier is not None and text.count(".") == 2:
            return self._token(text, now)
        if self.passwords is not None:  # as long as a known user's check: no user is told apart
            check_password(_decoy(), text)
        return BAD_CREDENTIALS

    def _token(self, token: str, now: float) -> Verdict:
        assert self.verifier is not None
        try:
            grant = self._granting(token)
        except Unauthorized as exc:
            if exc.code == "forbidden":
                why = "the token grants none of the subscriber, producer and admin roles"
                return Refused(NOT_AUTHORIZED, "token_roles", why)
            return Refused(BAD_USER_NAME_OR_PASSWORD, "bad_token", exc.message)
        filters: tuple[str, ...] | None = None
        if grant.rules is not None:
            filters = tuple(f for d in self.datasets for f in grant.rules.get(d, ()))
            try:
                check_filters(filters, "the token's rules")
            except InvalidView as exc:
                return Refused(NOT_AUTHORIZED, "bad_rules", str(exc))
        reads = filters if "subscriber" in grant.roles else ()
        if "admin" in grant.roles and reads is not None:
            reads = (*reads, SYS_TOPICS)  # the broker's figures (``mqtt.introspection``)
        writes = filters if "producer" in grant.roles else ()
        who = f"token of {grant.subject!r}" if grant.subject else "a token"
        rights = None if reads is None and writes is None else Rights(reads, writes)
        return Admitted(rights, who, grant.expires + grant.leeway - now)

    def _granting(self, token: str) -> Grant:
        """What ``token`` grants, if it grants one of the roles an MQTT client may have.

        Raises:
            Unauthorized: not a valid token (``unauthorized``), or none of those roles
                (``forbidden``).
        """
        assert self.verifier is not None
        for role in ("subscriber", "producer"):
            try:
                return self.verifier.verify(token, role)
            except Unauthorized as exc:
                if exc.code != "forbidden":
                    raise
        return self.verifier.verify(token, "admin")


@functools.cache
def _decoy() -> str:
    """The hash of a random password, checked against for unknown users (rule 3)."""
    return hash_password(secrets.token_hex(16))


class LoginLimiter:
    """Failed logins per address, a token bucket each (rule 6): ``burst`` attempts, refilled
    at ``rate`` a second; a successful login gives its attempt back. At most ``addresses``
    buckets are kept (the least recently used is forgotten); a full one is not kept at all."""

    def __init__(self, burst: int = 5, rate: float = 0.2, addresses: int = 10_000) -> None:
        self.burst, self.rate, self.addresses = float(burst), rate, addresses
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def attempt(self, address: str, now: float) -> bool:
        """Take an attempt for ``address`` at ``now``: whether it may try now."""
        tokens = self._tokens(address, now)
        allowed = tokens >= 1.0
        self._keep(address, tokens - 1.0 if allowed else tokens, now)
        return allowed

    def succeeded(self, address: str, now: float) -> None:
        """The attempt of ``address`` logged in: it is given back."""
        self._keep(address, self._tokens(address, now) + 1.0, now)

    def _tokens(self, address: str, now: float) -> float:
        tokens, at = self._buckets.pop(address, (self.burst, now))
        return min(self.burst, tokens + max(0.0, now - at) * self.rate)

    def _keep(self, address: str, tokens: float, now: float) -> None:
        if tokens < self.burst:
            self._buckets[address] = (tokens, now)
            while len(self._buckets) > self.addresses:
                self._buckets.popitem(last=False)


async def login(access: Access, limiter: LoginLimiter, connect: p.Connect, address: str) -> Verdict:
    """``access``'s verdict on ``connect`` from ``address``, checked in a thread, unless that
    address failed too often lately (rule 6)."""
    if not limiter.attempt(address, time.monotonic()):
        return Refused(
            CONNECTION_RATE_EXCEEDED,
            "rate_limited",
            "too many failed logins from your address: try again later",
        )
    verdict = await asyncio.to_thread(access.check, connect, time.time())
    if isinstance(verdict, Admitted):
        limiter.succeeded(address, time.monotonic())
    return verdict
