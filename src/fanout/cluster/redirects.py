"""The redirect policy: a relay answers a new subscription whose part another live relay is
responsible for with ``Error{code: "redirect"}`` naming that relay's URL (CA 3197003 [0111],
Fig. 9; docs/cluster.md). Rules:

1. A **new** subscription is redirected; a held one is served where it is until its part
   **moves** (a split, a merge, a joining owner), then ended with the same redirect
   (:func:`moved`) and followed by ``fanout.client.following``.
2. A subscription marked ``stay`` is served here, whoever owns it.
3. A relay that knows no members serves everything.
4. A relay whose lease **lapsed** serves nothing: each subscription goes to its owner in the
   map without it (:func:`elsewhere`), or is refused ``unavailable`` when none is left.
"""

from __future__ import annotations

from fanout.cluster.responsibility import ResponsibilityMap, part_of, taken_from
from fanout.views import View
from fanout.wire.messages import Error, Subscribe


def redirect(members: ResponsibilityMap, me: str, request: Subscribe, held: bool) -> Error | None:
    """The redirect answering ``request`` at relay ``me``, or None to serve it here.

    Args:
        members: the map as this relay last read it.
        me: this relay's name in the map.
        request: the subscription.
        held: whether this connection already holds ``request.sub`` (a view change).

    Returns:
        ``Error{code: "redirect", ref: sub, location: URL}``, or None (rules 1-3).
    """
    if held or request.stay or not members.members:
        return None
    part = part_of(request.dataset, request.view, members.side)
    owner = members.owner(part)
    if owner.name == me:
        return None
    message = f"relay {owner.name} is responsible for {part}: subscribe at {owner.url}"
    return Error("redirect", message, ref=request.sub, location=owner.url)


def answer(
    members: ResponsibilityMap, me: str, serving: bool, request: Subscribe, held: bool
) -> Error | None:
    """What answers ``request`` at relay ``me``, whose lease is its own if ``serving``: rule 4
    while it is not (``stay`` or not), else :func:`redirect`; None to serve it here."""
    if not serving:
        return elsewhere(members, me, request.dataset, request.view, request.sub)
    return redirect(members, me, request, held)


def elsewhere(members: ResponsibilityMap, me: str, dataset: str, view: View, sub: int) -> Error:
    """What answers (or ends) subscription ``sub`` at relay ``me`` while its lease is lapsed
    (rule 4): a redirect to its part's owner in ``members`` without ``me``, or ``unavailable``."""
    without = members.with_members({n: url for n, url in members.members.items() if n != me})
    why = f"relay {me} lost the map of responsibility (its lease lapsed)"
    if not without.members:
        return Error("unavailable", f"{why}: subscribe again later", ref=sub)
    owner = without.owner_of(dataset, view)
    return Error("redirect", f"{why}: subscribe at {owner.url}", ref=sub, location=owner.url)


def moved(
    before: ResponsibilityMap,
    after: ResponsibilityMap,
    me: str,
    *,
    dataset: str,
    view: View,
    sub: int,
) -> Error | None:
    """The redirect ending held subscription ``sub`` (``view`` of ``dataset``) at relay ``me``
    when the map changed from ``before`` to ``after``, or None to keep serving it (rule 1's
    moved case: its part went to another relay).
    """
    part = part_of(dataset, view, after.side)
    if not taken_from(before, after, me, part):
        return None
    owner = after.owner(part)
    message = f"{part} moved to relay {owner.name}: subscribe at {owner.url}"
    return Error("redirect", message, ref=sub, location=owner.url)
