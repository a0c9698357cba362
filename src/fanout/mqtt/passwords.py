"""The MQTT password file: ``user:hash`` lines, as ``mosquitto_passwd`` keeps them, with Argon2id
hashes (argon2-cffi, salted, the cost written in each hash) instead of Mosquitto's PBKDF2.

``fanout passwd`` (``cli/passwd.py``) writes it; the relay reads it at start
(``--mqtt-password-file``) and checks CONNECT's user name and password against it
(``mqtt.access``). Blank lines and lines starting with ``#`` are skipped (and not written
back). A file is written whole to a temporary file beside it, then renamed over it, readable by
its owner only.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from fanout.errors import ConfigError

#: OWASP's Argon2id settings (19 MiB, 2 passes, 1 lane): about 0.1 s a check on one core.
HASHER = PasswordHasher(time_cost=2, memory_cost=19456, parallelism=1)


def hash_password(password: str) -> str:
    """A salted Argon2id hash of ``password`` (PHC text: ``$argon2id$v=19$m=...``)."""
    return HASHER.hash(password)


def check_password(hashed: str, password: str) -> bool:
    """Whether ``password`` is the one ``hashed`` was made from (constant time in argon2)."""
    try:
        return HASHER.verify(hashed, password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


def check_user(user: str) -> None:
    """Raises:
    ConfigError: a user name the file cannot hold (empty, ``:``, a line break).
    """
    if not user or ":" in user or "\n" in user or "\r" in user:
        raise ConfigError(f"user name {user!r}: must be non-empty, without ':' or line breaks")


def read_passwords(path: Path) -> dict[str, str]:
    """The users of the password file at ``path`` and their hashes.

    Raises:
        ConfigError: it cannot be read, or a line is not ``user:$argon2...`` (named by number).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"password file {path}: cannot read it: {exc}") from None
    users: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        user, colon, hashed = line.partition(":")
        if not colon or not user or not hashed.startswith("$argon2"):
            raise ConfigError(
                f"password file {path}, line {number}: expected user:$argon2id$... (an Argon2"
                " hash written by 'fanout passwd'; Mosquitto's $6$/$7$ hashes are not read)"
            )
        users[user] = hashed
    return users


def write_passwords(path: Path, users: dict[str, str]) -> None:
    """Write ``users`` (user -> hash) to ``path``, replacing it at once, mode 0600.

    Raises:
        ConfigError: it cannot be written.
    """
    lines = "".join(f"{user}:{hashed}\n" for user, hashed in users.items())
    folder = path.resolve().parent
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
    except OSError as exc:
        raise ConfigError(f"password file {path}: cannot write it: {exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:  # mkstemp made it 0600
            out.write(lines)
        os.replace(temporary, path)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise ConfigError(f"password file {path}: cannot write it: {exc}") from None
