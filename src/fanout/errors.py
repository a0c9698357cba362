"""Errors that fanout raises to its callers.

Every error a user can cause carries a message that names the problem and where it is; the wire
layer turns them into ``Error(code, message)`` frames for whoever sent the bad input.
"""

from __future__ import annotations


class FanoutError(Exception):
    """Base class of every error fanout raises on purpose."""

    code = "error"


class InvalidView(FanoutError, ValueError):
    """A subscription view (region, SQL, topic filter, object path) is malformed or unsupported."""

    code = "invalid_view"


class ProtocolError(FanoutError, ValueError):
    """A peer sent a frame that does not decode or does not fit the conversation."""

    code = "protocol"


class ConfigError(FanoutError, ValueError):
    """The configuration (fanout.toml or command-line flags) is invalid."""

    code = "config"


class BadRequest(FanoutError, ValueError):
    """A well-formed request that cannot be answered as asked (say, a tick no longer kept)."""

    code = "bad_request"


class Unauthorized(FanoutError):
    """A connection or request without a valid token for what it asks (``fanout.auth``).

    Attributes:
        code: ``unauthorized`` (no token, or one that is not valid: HTTP 401) or ``forbidden``
            (a valid token that does not grant it: HTTP 403).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class InvalidWrite(BadRequest):
    """A write to an object (PPS text lines, an object or directory name) is malformed or not
    allowed; nothing of it was applied."""
