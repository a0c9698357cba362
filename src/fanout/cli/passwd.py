"""``fanout passwd``: manage the MQTT password file, as ``mosquitto_passwd`` does
(docs/security.md, "MQTT"): add or update a user (the password prompted twice, read from
standard input, or given with ``-b``), delete one (``-D``), start a new file (``-c``).

Passwords are hashed with Argon2id (``fanout.mqtt.passwords``); the relay reads the file at
start (``--mqtt-password-file``), so restart it after a change.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path
from typing import Any

from fanout import DISTRIBUTION
from fanout.errors import ConfigError


def passwd_parser(commands: Any, command: Any) -> None:
    """``fanout passwd``: add, update or delete a user of an MQTT password file."""
    parser = command(
        commands,
        "passwd",
        help="add, update or delete a user of the relay's MQTT password file",
        description=(
            "Manage the password file of the relay's MQTT port (--mqtt-password-file), as"
            " mosquitto_passwd does: 'fanout passwd FILE USER' prompts for the password twice;"
            " -D deletes the user; -b gives the password as an argument (visible to other users"
            " in the process list: prefer --password-stdin in scripts)."
        ),
    )
    parser.add_argument("file", type=Path, help="the password file (created if missing)")
    parser.add_argument("user", help="the user name")
    parser.add_argument(
        "password", nargs="?", default=None, help="with -b: the password (else prompted)"
    )
    how = parser.add_mutually_exclusive_group()
    how.add_argument("-D", dest="delete", action="store_true", help="delete the user")
    how.add_argument(
        "-b", dest="batch", action="store_true", help="take the password from the command line"
    )
    how.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from the first line of standard input",
    )
    parser.add_argument(
        "-c", dest="create", action="store_true", help="start a new file, replacing any there"
    )
    parser.set_defaults(run=run_passwd)


def run_passwd(args: argparse.Namespace) -> int:
    """Carry out ``fanout passwd``."""
    try:
        from fanout.mqtt import passwords
    except ModuleNotFoundError as exc:  # argon2-cffi comes with the relay's extra
        raise ConfigError(
            f"needs {exc.name}, which is not installed here: pip install '{DISTRIBUTION}[relay]'"
        ) from None
    if (args.password is not None) != args.batch:
        raise ConfigError("give the password as an argument with -b, and only then")
    passwords.check_user(args.user)
    users = {} if args.create or not args.file.exists() else passwords.read_passwords(args.file)
    if args.delete:
        if users.pop(args.user, None) is None:
            raise ConfigError(f"user {args.user!r} is not in {args.file}")
    else:
        users[args.user] = passwords.hash_password(_password(args))
    passwords.write_passwords(args.file, users)
    return 0


def _password(args: argparse.Namespace) -> str:
    """The new password, from ``-b``, standard input or the prompt (twice).

    Raises:
        ConfigError: it is empty, or the two typed differ.
    """
    if args.batch:
        password: str = args.password
    elif args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass("Password: ")
        if getpass.getpass("Reenter password: ") != password:
            raise ConfigError("the passwords do not match")
    if not password:
        raise ConfigError("the password is empty")
    return password
