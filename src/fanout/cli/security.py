"""The command line's security options: tokens, TLS, and ``fanout token`` (docs/security.md).

``fanout relay`` and ``fanout publisher`` take the server side (``--auth-*`` to check
tokens, ``--tls-cert``/``--tls-key`` to serve TLS); the relay, ``fanout subscribe`` and other
clients the client side (a token to present, ``--tls-ca`` to trust a private authority). A
token is read from a file (``--token-file``) or the ``FANOUT_TOKEN`` environment variable, never
from a flag's value, which any user of the machine could read in the process list.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from fanout.errors import ConfigError

TOKEN_VARIABLE = "FANOUT_TOKEN"


def add_server(parser: argparse.ArgumentParser) -> Any:
    """The flags of a server that checks tokens and may serve TLS; returns their group, for
    a server that is a client too (a relay) to add the client's flags to the same one."""
    group = parser.add_argument_group("security", "tokens and TLS (docs/security.md)")
    group.add_argument(
        "--auth-key-file",
        type=Path,
        default=None,
        help="check every connection's token (JWT) with the key in this file: the shared"
        " secret (HS256) or the public key, PEM (RS256). Without it, no token is needed",
    )
    group.add_argument(
        "--auth-algorithm",
        choices=["HS256", "RS256"],
        default="HS256",
        help="how tokens are signed (default: HS256)",
    )
    group.add_argument("--auth-audience", default=None, help="the 'aud' tokens must name")
    group.add_argument("--auth-issuer", default=None, help="the 'iss' tokens must name")
    group.add_argument("--tls-cert", type=Path, default=None, help="serve TLS: certificate (PEM)")
    group.add_argument("--tls-key", type=Path, default=None, help="serve TLS: private key (PEM)")
    return group


def add_client(parser: argparse.ArgumentParser, *, group: Any = None) -> None:
    """The flags of a client that presents a token and may trust a private authority, in
    ``group`` if given (one help section titled "security", not two), else a new one."""
    where = group or parser.add_argument_group("security", "tokens and TLS (docs/security.md)")
    where.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help=f"present the token (JWT) in this file (default: ${TOKEN_VARIABLE}, if set)",
    )
    where.add_argument(
        "--tls-ca",
        type=Path,
        default=None,
        help="trust the authorities in this PEM file for wss:// (default: the system's)",
    )


def auth_config(args: argparse.Namespace) -> Any:
    """The ``AuthConfig`` the server flags ask for, or None.

    Raises:
        ConfigError: the key file cannot be read or holds no key of the algorithm.
    """
    if args.auth_key_file is None:
        for flag in ("auth_audience", "auth_issuer"):
            if getattr(args, flag) is not None:
                raise ConfigError(f"--{flag.replace('_', '-')} needs --auth-key-file")
        return None
    from fanout.auth import AuthConfig

    return AuthConfig.from_file(
        args.auth_algorithm,
        args.auth_key_file,
        audience=args.auth_audience,
        issuer=args.auth_issuer,
    )


def token(args: argparse.Namespace) -> str:
    """The token the client flags give ("" for none).

    Raises:
        ConfigError: the token file cannot be read.
    """
    if args.token_file is not None:
        try:
            return args.token_file.read_text(encoding="utf-8").strip()  # type: ignore[no-any-return]
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--token-file {args.token_file}: cannot read it: {exc}") from None
    return os.environ.get(TOKEN_VARIABLE, "").strip()


# -- fanout token ------------------------------------------------------------------------------


def token_parser(commands: Any, command: Any) -> None:
    """``fanout token``: sign a token."""
    parser = command(
        commands,
        "token",
        help="sign a token (JWT) for a subscriber, producer, relay or admin",
        description=(
            "Sign a JSON Web Token granting roles and, optionally, per-dataset rules, and print"
            " it. Give it to the connecting side (--token-file, $FANOUT_TOKEN, Hello.token, or"
            " HTTP's Authorization: Bearer)."
        ),
    )
    parser.add_argument(
        "--key-file",
        type=Path,
        required=True,
        help="the shared secret (HS256) or the private key, PEM (RS256)",
    )
    parser.add_argument("--algorithm", choices=["HS256", "RS256"], default="HS256")
    parser.add_argument(
        "--role",
        action="append",
        choices=["subscriber", "producer", "relay", "admin"],
        required=True,
        help="a role granted (repeatable)",
    )
    parser.add_argument("--subject", default="", help="who it is for (its 'sub')")
    parser.add_argument("--audience", default=None, help="its 'aud'")
    parser.add_argument("--issuer", default=None, help="its 'iss'")
    parser.add_argument(
        "--ttl", type=float, default=3600.0, help="seconds it is valid for (default: 3600)"
    )
    parser.add_argument(
        "--rule",
        action="append",
        default=[],
        metavar="DATASET=VIEW",
        help="a view its holder may see of a dataset, e.g. agents=box:0,0,500,500 or"
        " \"orders=SELECT * FROM orders WHERE tenant = 'a'\" (repeatable: several views of a"
        " dataset add up); a dataset with no rule is not readable when any rule is given",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object: the token and what it grants (roles, subject, rules, expires)",
    )
    parser.set_defaults(run=run_token)


def rules_of(given: list[str]) -> dict[str, list[str]]:
    """``--rule DATASET=VIEW`` options as a rules claim: dataset -> views.

    Raises:
        ConfigError: one is not ``DATASET=VIEW``.
    """
    rules: dict[str, list[str]] = {}
    for rule in given:
        dataset, equals, view = rule.partition("=")
        if not equals or not dataset or not view:
            raise ConfigError(f"--rule {rule!r}: expected DATASET=VIEW")
        rules.setdefault(dataset, []).append(view)
    return rules


def run_token(args: argparse.Namespace) -> int:
    """Print the token ``fanout token``'s flags ask for."""
    from fanout.auth import issue

    try:
        key = args.key_file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--key-file {args.key_file}: cannot read it: {exc}") from None
    rules = rules_of(args.rule) if args.rule else None
    now = time.time()
    signed = issue(
        args.algorithm,
        key,
        args.role,
        subject=args.subject,
        ttl=args.ttl,
        audience=args.audience,
        issuer=args.issuer,
        rules=rules,
        now=now,
    )
    if not args.json:
        print(signed)
        return 0
    granted = {"roles": args.role, "subject": args.subject, "rules": rules}
    print(json.dumps({"token": signed, **granted, "expires": int(now + args.ttl)}))
    return 0
