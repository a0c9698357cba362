"""PPS notification groups (mount.groups): ids, lines queued once each in order, unknown groups
refused with the way to make one, and an ended group telling no one."""

from __future__ import annotations

import pytest

from fanout.errors import InvalidView
from fanout.mount.groups import Groups


def test_a_group_queues_each_line_once_in_order_and_says_when_a_member_closed() -> None:
    groups = Groups()
    group = groups.make()
    fish, water = groups.member(f"{group.id}:water")
    assert fish is group and water == "water"
    assert not group.pending
    for value in ("water", "air", "water"):
        group.tell(value)
    group.closed("air")
    assert group.take() == f"{group.id}:water\n{group.id}:air\n-{group.id}:air\n"
    assert not group.pending and group.take() == ""


def test_unknown_and_ended_groups_are_refused() -> None:
    groups = Groups()
    first, second = groups.make(), groups.make()
    assert first.id != second.id
    groups.end(first)
    assert first.ended
    with pytest.raises(InvalidView, match=r"open /\.notify and read its id first"):
        groups.member(f"{first.id}:x")
    with pytest.raises(InvalidView, match="no notification group '77'"):
        groups.member("77:x")
