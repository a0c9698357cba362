"""Admission: what the relay does with a subscription or a write, checked against a plain
oracle (the map first, then the token's rules, point by point for boxes)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fanout.auth import Grant
from fanout.relay.core.admission import (
    NOT_A_PRODUCER,
    Forward,
    Redirect,
    Refuse,
    Serve,
    admit,
    admit_write,
    roles,
)
from fanout.views import Box
from fanout.views.sql import Sql
from fanout.wire.messages import Error, Publish, Subscribe

coords = st.integers(0, 8)
POINTS = [(x / 2, y / 2) for x in range(-1, 19) for y in range(-1, 19)]
AWAY = Error("redirect", "relay b is responsible", ref=7, location="ws://b:1")


@st.composite
def boxes(draw: st.DrawFn) -> Box:
    x0, x1 = sorted((draw(coords), draw(coords)))
    y0, y1 = sorted((draw(coords), draw(coords)))
    return Box((x0, y0), (x1, y1))


def inside(box: Box, x: float, y: float) -> bool:
    return box.lo[0] <= x <= box.hi[0] and box.lo[1] <= y <= box.hi[1]


def grant(rules: dict[str, tuple[str, ...]] | None, *roles: str) -> Grant:
    return Grant("someone", frozenset(roles or {"subscriber"}), rules, expires=2e9)


@given(
    view=boxes(),
    rule=st.none() | boxes(),
    named=st.booleans(),
    known=st.booleans(),
    authenticated=st.booleans(),
    redirected=st.booleans(),
)
def test_a_subscription_is_redirected_refused_or_served_as_the_oracle_says(
    *,
    view: Box,
    rule: Box | None,
    named: bool,
    known: bool,
    authenticated: bool,
    redirected: bool,
) -> None:
    request = Subscribe(7, "agents", view)
    rules = None if rule is None else {("agents" if named else "other"): (str(rule),)}
    who = grant(rules) if authenticated else None
    datasets = {"agents": "space"} if known else {}
    decided = admit(request, who, datasets, AWAY if redirected else None)
    if redirected:  # the map first, whatever the token says
        assert decided == Redirect(AWAY)
    elif who is None or rule is None:
        assert decided == Serve(request)
    elif not named:
        assert isinstance(decided, Refuse)
        assert (decided.error.code, decided.error.ref) == ("forbidden", 7)
    elif not known:  # the core refuses a dataset it does not know, naming those it does
        assert decided == Serve(request)
    else:
        wanted = {p for p in POINTS if inside(view, *p) and inside(rule, *p)}
        if isinstance(decided, Refuse):
            assert decided.error.code == "forbidden"
            assert not wanted, "refused although the view meets the rules"
            return
        assert isinstance(decided, Serve)
        served = decided.request
        assert (served.sub, served.dataset) == (7, "agents")
        assert isinstance(served.view, Box)
        assert {p for p in POINTS if inside(served.view, *p)} == wanted


def test_a_sql_view_under_rules_is_served_restricted_to_them() -> None:
    """A SQL view names its tables itself: the rules of each are applied (``restrict_sql``)."""
    request = Subscribe(1, "orders", Sql("SELECT * FROM orders"))
    decided = admit(request, grant({"orders": ("region = 'eu'",)}), {"orders": "sql"})
    assert isinstance(decided, Serve)
    assert isinstance(decided.request.view, Sql)
    assert "eu" in decided.request.view.text


def test_a_write_needs_the_producer_role_only_under_authentication() -> None:
    write = Publish(3, "events")
    assert admit_write(write, None, authenticating=False) == Forward(write)
    assert admit_write(write, grant(None, "producer"), authenticating=True) == Forward(write)
    for who in (None, grant(None, "subscriber")):
        assert admit_write(write, who, authenticating=True) == Refuse(
            Error("forbidden", NOT_A_PRODUCER, ref=3)
        )


def test_relays_below_are_served_when_told_or_forwarding_in_a_map() -> None:
    assert roles(serve_relays=False, forwarding=False) == {"subscriber"}
    assert roles(serve_relays=True, forwarding=False) == {"subscriber", "relay"}
    assert roles(serve_relays=False, forwarding=True) == {"subscriber", "relay"}
