"""Admission: what the relay does with a connection's subscription or write, and which roles
it serves. Pure: the shell asks, then carries the answer out.

A subscription (``admit``), in this order: another relay of the map is responsible for it
(``cluster.redirects``): ``Redirect`` there, whatever the token says (that relay checks it);
the connection's token carries access rules: ``Serve`` it restricted to them
(``relay.core.rules.restrict``), or ``Refuse`` it ``forbidden``; otherwise ``Serve`` it as asked.

A write (``admit_write``): with authentication, only a token granting the ``producer`` role may
write; an admitted write is ``Forward``-ed to the publisher (``relay.core.forwarding`` may still
refuse it for want of room or of a publisher).

Roles (``roles``): a relay serves subscribers, and relays below it too when told to
(``--serve-relays``) or when it forwards in a map (``--registry-policy forward``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fanout.auth import Grant
from fanout.errors import Unauthorized
from fanout.relay.core.rules import restrict
from fanout.wire.messages import Error, Publish, Role, Subscribe

#: Why a write without the producer role is refused, under authentication.
NOT_A_PRODUCER = "writing needs a token granting the producer role"


@dataclass(frozen=True, slots=True)
class Serve:
    """Hand the subscription to the core: ``request`` is the effective one (as asked, or its
    view intersected with the connection's rules)."""

    request: Subscribe


@dataclass(frozen=True, slots=True)
class Redirect:
    """Answer the subscription with ``error`` (code ``redirect``, its ``location``)."""

    error: Error


@dataclass(frozen=True, slots=True)
class Refuse:
    """Answer the subscription or write with ``error`` and do nothing else."""

    error: Error


@dataclass(frozen=True, slots=True)
class Forward:
    """Send the write on to the publisher."""

    request: Publish


def admit(
    request: Subscribe,
    grant: Grant | None,
    datasets: Mapping[str, str],
    redirect: Error | None = None,
) -> Serve | Redirect | Refuse:
    """What to do with a subscription request (rules 1-3 above).

    Args:
        request: the ``Subscribe`` as the connection sent it.
        grant: what the connection's token grants (None: no authentication).
        datasets: the relay's datasets, name -> index kind.
        redirect: the map's answer for ``request`` (``Registry.redirect``), None to serve it here.
    """
    if redirect is not None:
        return Redirect(redirect)
    if grant is None:
        return Serve(request)
    try:
        return Serve(restrict(request, grant.rules, datasets))
    except Unauthorized as exc:
        return Refuse(Error(exc.code, exc.message, ref=request.sub))


def admit_write(request: Publish, grant: Grant | None, authenticating: bool) -> Forward | Refuse:
    """What to do with a connection's write: forward it, or refuse it ``forbidden`` when the
    relay authenticates and the connection's token does not grant ``producer``."""
    if authenticating and (grant is None or "producer" not in grant.roles):
        return Refuse(Error("forbidden", NOT_A_PRODUCER, ref=request.req))
    return Forward(request)


def roles(serve_relays: bool, forwarding: bool) -> frozenset[Role]:
    """The roles a relay's ``Hello`` accepts: relays below too if it serves relays or
    forwards in a map (``forwarding``)."""
    return frozenset({"subscriber", "relay"} if serve_relays or forwarding else {"subscriber"})
