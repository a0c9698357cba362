"""Objects as cells (views.objects.store): quality ordering, deletions, [n], a critical writer's
purge and restarts against a dict-of-dicts oracle, and the cells each request emits."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanout.errors import InvalidWrite
from fanout.views.objects.store import VOLATILE, ObjectStore, cell_key
from fanout.views.objects.text import DeleteAttribute, SetAttribute, Value

OBJECTS = ("/a/x", "/a/y", "/b/c/z")
ATTRS = ("p", "q", "r")


@dataclass
class Oracle:
    """The rules, kept plainly: object -> attr -> (text, quality, persist)."""

    attrs: dict[str, dict[str, tuple[str, int, bool]]] = field(default_factory=dict)
    persist: dict[str, bool] = field(default_factory=dict)

    def write(
        self, obj: str, attr: str, text: str, quality: int, persist: bool, *, new: bool
    ) -> None:
        if obj not in self.attrs:
            self.attrs[obj] = {}
            self.persist[obj] = new
        held = self.attrs[obj].get(attr)
        if held is None or quality >= held[1]:
            self.attrs[obj][attr] = (text, quality, persist)

    def delete_attr(self, obj: str, attr: str) -> None:
        if obj not in self.attrs:
            self.attrs[obj] = {}
            self.persist[obj] = True
        self.attrs[obj].pop(attr, None)

    def delete_object(self, obj: str) -> bool:
        if obj not in self.attrs:
            return False
        del self.attrs[obj], self.persist[obj]
        return True

    def purge(self, obj: str) -> None:
        attrs = self.attrs.get(obj, {})
        for attr in [attr for attr, (_, _, keep) in attrs.items() if not keep]:
            del attrs[attr]

    def restart(self) -> None:
        for obj in [obj for obj, keep in self.persist.items() if not keep]:
            self.delete_object(obj)
        for attrs in self.attrs.values():
            for attr in [attr for attr, (_, _, keep) in attrs.items() if not keep]:
                del attrs[attr]


ops = st.one_of(
    st.tuples(
        st.just("write"),
        st.sampled_from(OBJECTS),
        st.sampled_from(ATTRS),
        st.text("ab", max_size=2),
        st.integers(0, 9),
        st.booleans(),
        st.booleans(),
    ),
    st.tuples(st.just("delete_attr"), st.sampled_from(OBJECTS), st.sampled_from(ATTRS)),
    st.tuples(st.just("delete_object"), st.sampled_from(OBJECTS)),
    st.tuples(st.just("purge"), st.sampled_from(OBJECTS)),
    st.tuples(st.just("restart")),
)


def seen(store: ObjectStore) -> dict[str, dict[str, tuple[str, int, bool]]]:
    return {
        obj: {attr: (c.value.text, c.quality, c.persist) for attr, c in cells.items()}
        for obj, cells in store.objects().items()
    }


@settings(max_examples=300)
@given(st.lists(ops, max_size=40))
def test_quality_deletions_and_restarts_follow_the_oracle(script: list[tuple[object, ...]]) -> None:
    store, oracle = ObjectStore(), Oracle()
    log = ObjectStore()  # the cells as the log and Spark's latest-per-key state see them
    for op in script:
        match op:
            case ("write", str(obj), str(attr), str(text), int(quality), bool(keep), bool(new)):
                line = SetAttribute(attr, Value("", text), quality, keep)
                effects = store.write(obj, [line], persist=new)
                oracle.write(obj, attr, text, quality, keep, new=new)
            case ("delete_attr", str(obj), str(attr)):
                effects = store.write(obj, [DeleteAttribute(attr)])
                oracle.delete_attr(obj, attr)
            case ("delete_object", str(obj)):
                if oracle.delete_object(obj):
                    effects = store.delete_object(obj)
                else:
                    with pytest.raises(InvalidWrite, match="no object"):
                        store.delete_object(obj)
                    continue
            case ("purge", str(obj)):  # a critical writer of obj closed
                effects = store.admit([], [cell_key(obj, VOLATILE)])
                oracle.purge(obj)
            case _:
                effects = store.restart()
                oracle.restart()
                # a restarted publisher reads its state back: the cells alone must be enough
                store = ObjectStore(store)
        log.apply(effects.upserts, effects.deletes)
        assert seen(store) == oracle.attrs
        assert log.cells == store.cells
    for obj in oracle.attrs:
        assert store.is_directory(obj.rsplit("/", 1)[0])


def test_two_producers_writing_different_attributes_merge() -> None:
    store = ObjectStore()
    store.write("/cars/c1", [SetAttribute("speed", Value("n", "50"))])
    store.write("/cars/c1", [SetAttribute("driver", Value("", "ann"))])
    assert store.attributes("/cars/c1") == {"speed": Value("n", "50"), "driver": Value("", "ann")}


def test_a_failing_request_applies_nothing() -> None:
    store = ObjectStore()
    store.write("/d/o", [SetAttribute("a", Value("", "1"))])
    before = dict(store.cells)
    bad = [SetAttribute("a", Value("", "2")), SetAttribute("b", Value("n", "x"))]
    with pytest.raises(InvalidWrite, match="not a finite number"):
        store.write("/d/o", bad)
    with pytest.raises(InvalidWrite, match="is a directory"):
        store.admit(
            [{"object": "/e/p", "attr": "a", "value": "1"}, {"object": "/d", "attr": "a"}], []
        )
    assert store.cells == before


def test_directories() -> None:
    store = ObjectStore()
    assert store.make_directory("/a/b").upserts == [
        {
            "cell": "/a?/",
            "object": "/a",
            "attr": "/",
            "value": "",
            "encoding": "",
            "quality": 0,
            "persist": True,
        },
        {
            "cell": "/a/b?/",
            "object": "/a/b",
            "attr": "/",
            "value": "",
            "encoding": "",
            "quality": 0,
            "persist": True,
        },
    ]
    store.write("/a/b/o", [SetAttribute("k", Value("", "v"))])
    assert store.entries("/a") == ["/a/b"]
    assert store.entries("/a/b") == ["/a/b/o"]
    with pytest.raises(InvalidWrite, match="not empty"):
        store.remove_directory("/a/b")
    with pytest.raises(InvalidWrite, match="is an object"):
        store.make_directory("/a/b/o")
    effects = store.admit([], [cell_key("/a/b/o", ""), cell_key("/a/b", "/")])
    assert effects.deletes == ["/a/b/o?k", "/a/b/o?", "/a/b?/"]
    assert store.entries("/a") == []


@pytest.mark.parametrize("path", ["relative", "/a/.all", "/a/../b", "/a?delta", "/", "/a//b"])
def test_a_bad_object_path_is_refused(path: str) -> None:
    with pytest.raises(InvalidWrite):
        ObjectStore().write(path, [SetAttribute("a", Value("", "1"))])


def test_a_request_whose_then_fails_is_undone() -> None:
    store = ObjectStore()
    store.write("/d/o", [SetAttribute("a", Value("", "1"))])
    before = dict(store.cells)

    def log_full(effects: object) -> None:
        raise OSError("the log refused")

    row = {"object": "/d/o", "attr": "a", "value": "2", "quality": 0, "persist": True}
    with pytest.raises(OSError, match="refused"):
        store.admit([row, {"object": "/e/p", "attr": ""}], ["/d/o?a"], then=log_full)
    assert store.cells == before
    seen: list[object] = []
    effects = store.admit([row], [], then=seen.append)
    assert seen == [effects] and store.attributes("/d/o") == {"a": Value("", "2")}
