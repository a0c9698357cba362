"""Entity primitives: the row of one key, held by a relay for views relative to it."""

from __future__ import annotations

import pytest

from fanout.errors import InvalidView
from fanout.views import Box, covers, residual
from fanout.views.entity import Entity
from fanout.wire import codec
from fanout.wire.messages import Acquire


def test_an_entity_primitive_travels_in_an_acquire() -> None:
    for key in (42, "car-1", "with space"):
        acquire = Acquire(3, "agents", Entity(key))
        assert codec.to_publisher().decode(codec.encode(acquire)) == acquire


@pytest.mark.parametrize("key", ["", True, 1.5, None])
def test_a_key_must_be_an_integer_or_a_non_empty_string(key: object) -> None:
    with pytest.raises(InvalidView, match="entity: key"):
        Entity(key)  # type: ignore[arg-type]


def test_text_form() -> None:
    assert str(Entity(42)) == "entity:42"
    assert str(Entity("car-1")) == "entity:car-1"
    assert str(Entity("7")) == 'entity:"7"'  # would read back as an integer


def test_an_entity_covers_exactly_itself() -> None:
    assert covers([Entity(1), Box((0, 0), (1, 1))], Entity(1))
    assert not covers([Entity(2)], Entity(1))
    assert not covers([Entity("1")], Entity(1))
    assert residual([Entity(2)], Entity(1)) == [Entity(1)]
    assert residual([Entity(1)], Entity(1)) == []
