"""Tokens: who may connect to a relay or the publisher, in which role, and what they may see
(docs/security.md).

With authentication configured (``AuthConfig``), every connection presents a JSON Web Token (in
its ``Hello``, or to the HTTP API as a bearer token or ``access_token=``), HS256 or RS256,
checked by PyJWT; one without a valid token is refused before it reads or writes anything.
Claims read: ``exp`` (required), ``nbf``, ``iat``, ``aud`` and ``iss`` when configured;
``roles`` (``subscriber``, ``producer``, ``relay``, ``admin``: a reader needs ``relay``, the
relay's admin API, MQTT lists and ``$SYS`` ``admin``); ``sub`` for logs; ``rules`` per dataset
(``relay.core.rules``). Refusals never echo the token, and say what is
wrong in words a client's developer can act on.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jwt
from cryptography.hazmat.primitives import serialization

from fanout.errors import ConfigError, Unauthorized

log = logging.getLogger(__name__)

Algorithm = Literal["HS256", "RS256"]
ALGORITHMS: tuple[Algorithm, ...] = ("HS256", "RS256")
#: ``admin``: a relay's admin API, its MQTT figures and lists (``GET /v1/admin/...``,
#: ``GET /v1/mqtt/...``, ``$SYS`` over MQTT).
ROLES = ("subscriber", "producer", "relay", "admin")
#: The token role each ``Hello`` role (or ``admin``) needs.
NEEDED = {
    "subscriber": "subscriber",
    "producer": "producer",
    "relay": "relay",
    "reader": "relay",
    "admin": "admin",
}
#: Shortest HS256 secret accepted, in bytes (RFC 7518 3.2: at least the hash's size).
MIN_SECRET = 32


@dataclass(frozen=True)
class AuthConfig:
    """How tokens are checked.

    Attributes:
        algorithm: ``HS256`` or ``RS256``.
        key: HS256: the shared secret; RS256: the public key, PEM.
        audience: the ``aud`` a token must name (None: tokens must not name one).
        issuer: the ``iss`` a token must name (None: not checked).
        leeway: seconds of clock skew allowed on ``exp`` and ``nbf``.
    """

    algorithm: Algorithm
    key: str = field(repr=False)
    audience: str | None = None
    issuer: str | None = None
    leeway: float = 0.0

    def __post_init__(self) -> None:
        """Raises:
        ConfigError: an unknown algorithm, a short secret, or an RS256 key that is not a
            public key in PEM.
        """
        if self.algorithm not in ALGORITHMS:
            raise ConfigError(
                f"auth algorithm must be one of {', '.join(ALGORITHMS)}, not {self.algorithm!r}"
            )
        if self.algorithm == "HS256" and len(self.key.encode()) < MIN_SECRET:
            raise ConfigError(f"an HS256 secret must be at least {MIN_SECRET} bytes long")
        if self.algorithm == "RS256":
            try:
                serialization.load_pem_public_key(self.key.encode())
            except (ValueError, TypeError):
                raise ConfigError("the RS256 key must be a public key in PEM") from None
        if not 0 <= self.leeway < 3600:
            raise ConfigError(f"auth leeway must be in [0, 3600) seconds, not {self.leeway}")

    @classmethod
    def from_file(cls, algorithm: str, path: Path, **options: Any) -> AuthConfig:
        """A config whose key (secret or public key) is the content of ``path``.

        Raises:
            ConfigError: the file cannot be read, or the key is not one (see the class).
        """
        try:
            key = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"auth key file {path}: cannot read it: {exc}") from None
        return cls(algorithm, key, **options)  # type: ignore[arg-type]  # checked there


@dataclass(frozen=True)
class Grant:
    """What a valid token grants.

    Attributes:
        subject: its ``sub`` ("" if none).
        roles: the roles it grants.
        rules: dataset -> the views its holder may see there, as text, in the dataset's view
            language (the ``rules`` claim); None: no rules claim, every row of every dataset.
        expires: when it expires (seconds since the epoch).
        leeway: seconds past ``expires`` the verifier still accepted it (clock skew): a
            connection it opened ends at ``expires + leeway`` (``fanout.expiry``).
    """

    subject: str
    roles: frozenset[str]
    rules: Mapping[str, tuple[str, ...]] | None
    expires: float
    leeway: float = 0.0


class Verifier:
    """Checks tokens against one ``AuthConfig``."""

    def __init__(self, config: AuthConfig) -> None:
        self.config = config

    def verify(self, token: str | None, role: str) -> Grant:
        """Check ``token`` for a connection in ``role`` (a ``Hello`` role).

        Returns:
            What the token grants.

        Raises:
            Unauthorized: code ``unauthorized``: no token, or one that is not valid (the
                message says why); code ``forbidden``: a valid token without the role.
        """
        if not token:
            raise Unauthorized("unauthorized", "a token is required: none was given")
        config = self.config
        try:
            claims = jwt.decode(
                token,
                config.key,
                algorithms=[config.algorithm],
                audience=config.audience,
                issuer=config.issuer,
                leeway=config.leeway,
                options={"require": ["exp"]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthorized("unauthorized", "the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise Unauthorized("unauthorized", "the token is not valid yet (nbf)") from None
        except jwt.InvalidAudienceError:
            wanted = config.audience or "none"
            raise Unauthorized(
                "unauthorized", f"the token is for another audience (this one: {wanted})"
            ) from None
        except jwt.InvalidIssuerError:
            raise Unauthorized("unauthorized", "the token is from another issuer") from None
        except jwt.InvalidSignatureError:
            raise Unauthorized("unauthorized", "the token's signature does not verify") from None
        except jwt.InvalidAlgorithmError:
            raise Unauthorized(
                "unauthorized", f"the token is not signed with {config.algorithm}"
            ) from None
        except jwt.MissingRequiredClaimError as exc:
            raise Unauthorized("unauthorized", f"the token has no {exc.claim!r} claim") from None
        except jwt.InvalidTokenError:
            raise Unauthorized("unauthorized", "the token is not a valid JWT") from None
        grant = dataclasses.replace(_grant(claims), leeway=config.leeway)
        needed = NEEDED.get(role, role)
        if needed not in grant.roles:
            granted = ", ".join(sorted(grant.roles)) or "none"
            raise Unauthorized(
                "forbidden", f"the token does not grant role {needed!r} (it grants: {granted})"
            )
        return grant


class PresentedToken:
    """The token a process presents to its upstream: a token file's as it is now, read again at
    each connection (a token renewed there is presented at the next one), else the token it
    started with. A file that cannot be read is logged and the last token read presented."""

    def __init__(self, token: str, path: Path | None = None) -> None:
        self._token, self.path = token, path

    def current(self) -> str:
        """The token to present now."""
        if self.path is not None:
            try:
                self._token = self.path.read_text(encoding="utf-8").strip()
            except OSError as exc:
                log.warning("token file %s: %s; presenting the last token read", self.path, exc)
        return self._token


def issue(
    algorithm: Algorithm,
    key: str,
    roles: Sequence[str],
    *,
    subject: str = "",
    ttl: float = 3600.0,
    audience: str | None = None,
    issuer: str | None = None,
    rules: Mapping[str, str | Sequence[str]] | None = None,
    now: float | None = None,
) -> str:
    """Sign a token (``fanout token``, tests).

    Args:
        algorithm: ``HS256`` (``key`` the secret) or ``RS256`` (``key`` the private key, PEM).
        roles: the roles granted.
        subject, audience, issuer: its ``sub``, ``aud``, ``iss``.
        ttl: seconds it is valid for.
        rules: dataset -> the views (text) its holder may see there.
        now: the time it is issued at (default: now).

    Raises:
        ConfigError: an unknown role, or a key that cannot sign.
    """
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        raise ConfigError(f"unknown role {unknown[0]!r}; roles are {', '.join(ROLES)}")
    issued = time.time() if now is None else now
    claims: dict[str, Any] = {"roles": list(roles), "iat": int(issued), "exp": int(issued + ttl)}
    optional = {"sub": subject, "aud": audience, "iss": issuer}
    claims.update({name: value for name, value in optional.items() if value})
    if rules is not None:
        claims["rules"] = {
            name: [views] if isinstance(views, str) else list(views)
            for name, views in rules.items()
        }
    try:
        return jwt.encode(claims, key, algorithm=algorithm)
    except (ValueError, TypeError, jwt.InvalidKeyError) as exc:
        raise ConfigError(f"cannot sign with this {algorithm} key: {exc}") from None


def _grant(claims: Mapping[str, Any]) -> Grant:
    roles = claims.get("roles", [])
    if not isinstance(roles, list) or not all(isinstance(role, str) for role in roles):
        raise Unauthorized("unauthorized", "the token's 'roles' claim must be a list of names")
    subject = claims.get("sub", "")
    return Grant(
        str(subject),
        frozenset(roles) & frozenset(ROLES),
        _rules(claims.get("rules")),
        float(claims["exp"]),
    )


def _rules(value: object) -> Mapping[str, tuple[str, ...]] | None:
    """The ``rules`` claim: {dataset: view text or [view texts]} (views are parsed where used)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Unauthorized("unauthorized", "the token's 'rules' claim must be an object")
    rules: dict[str, tuple[str, ...]] = {}
    for dataset, views in value.items():
        listed = [views] if isinstance(views, str) else views
        if not isinstance(listed, list) or not all(isinstance(view, str) for view in listed):
            raise Unauthorized(
                "unauthorized",
                f"the token's rules for {dataset!r} must be a view or a list of views (text)",
            )
        rules[str(dataset)] = tuple(listed)
    return rules
