"""The View union of every kind: one msgspec field type decodes any view by its tag."""

from __future__ import annotations

import msgspec
import pytest

from fanout.errors import InvalidView
from fanout.views import View, kind_of, parse
from fanout.views.entity import Entity
from fanout.views.kinds import of_kind
from fanout.views.region import Box, RegionUnion, Relative, Sector, Sphere


class Subscribe(msgspec.Struct, frozen=True):
    """A message carrying a view, as the wire protocol will."""

    view: View


EXAMPLES = [
    ("region", Box([0, 0], [1, 1])),
    ("region", Sphere([0, 0, 0], 2)),
    ("region", Sector([0, 0], 3, 0.5, 0.25)),
    ("region", RegionUnion([Box([0, 0], [1, 1]), Sphere([2, 2], 1)])),
    ("region", Relative(7, Sphere([0, 0], 50))),
    ("sql", parse("SELECT * FROM t WHERE x < 5", "sql")),
    ("topic", parse("sensors/+/temp", "topic")),
    ("path", parse("/pps/media/.all", "path")),
    ("entity", Entity(7)),
    ("entity", Entity("car-1")),
]


@pytest.mark.parametrize(("kind", "view"), EXAMPLES, ids=[str(v) for _, v in EXAMPLES])
def test_every_view_round_trips_through_the_union_and_knows_its_kind(kind: str, view: View) -> None:
    wire = msgspec.msgpack.encode(Subscribe(view))
    assert msgspec.msgpack.decode(wire, type=Subscribe) == Subscribe(view)
    assert kind_of(view) == kind


def test_tags_are_unique_across_kinds() -> None:
    decoder = msgspec.msgpack.Decoder(View)
    assert decoder.decode(msgspec.msgpack.encode(Box([0, 0], [1, 1]))) == Box([0, 0], [1, 1])


def test_of_kind_keeps_only_that_kind_and_refuses_non_views() -> None:
    held = [view for _, view in EXAMPLES]
    assert of_kind("topic")(held) == [parse("sensors/+/temp", "topic")]
    assert len(of_kind("region")(held)) == 5
    with pytest.raises(InvalidView, match="is not a view"):
        kind_of("box:0,0,1,1")
