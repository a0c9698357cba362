"""The redirect policy: a relay answers a new subscription whose part another live relay is
responsible for with ``Error{code: "redirect"}`` naming that relay's URL (CA 3197003 [0111],
Fig. 9: a request landing at the wrong intermediary process is sent to the responsible one).

Rules:

1. A **new** subscription is redirected; a subscription the relay holds keeps being served
   where it is when its view changes. When its part **moves** — a split handed the part to
   another relay, a merge handed it back (``responsibility`` rule 4), or a relay joined that is
   now responsible for it (rule 2) — the relay ends the held subscription with the same
   redirect (:func:`moved`), and ``fanout.client.following`` subscribes there again, resuming an
   ``every`` view with its token: the subscribers move with their part, so views of one place
   keep meeting at one relay however the members change.
2. A subscription marked ``stay`` is served here, whoever owns it: its subscriber could not reach
   the owner, or was sent round in a circle while relays disagreed about the members.
3. A relay that knows no members (no registry, or not joined yet) serves everything, as a relay
   alone does.
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
