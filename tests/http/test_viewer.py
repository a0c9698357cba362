"""The viewer's own logic in headless Chromium, against a relay on a scripted publisher: regions
typed into the page (``http/viewer/viewtext.js``) are read as ``fanout.views.text`` reads them,
the same view or the same refusal for every text of a seeded random mix, valid and not; topic
filters and object paths joined by `` | `` are any of them. (The page against a real publisher,
dataset by dataset: tests/integration/test_viewer.py.)"""

from __future__ import annotations

import json
import random
from typing import Any

import msgspec

from fanout.errors import InvalidView
from fanout.testing.catalog import catalog
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.relays import running_relay
from fanout.views.text import parse_region

#: Read each of ``texts`` with the page's parser: the view as JSON, or the error's class name.
PARSE = """import("/viewtext.js").then((m) => JSON.stringify(%s.map(([text, language]) => {
  try { return {view: m.parseView(text, language)}; } catch (e) { return {error: e.name}; }
})))"""


def number(rng: random.Random) -> str:
    if rng.random() < 0.05:
        return rng.choice(["x", "", "1..2", "--1"])
    return rng.choice([str(rng.randint(-5, 9)), f"{rng.uniform(0, 3):.2f}", "1e1", ".5", "-0"])


def primitive(rng: random.Random) -> str:
    name = rng.choices(["box", "sphere", "sector", "circle"], [4, 3, 3, 1])[0]
    dims = rng.choice([2, 3])
    count = {"box": 2 * dims, "sphere": dims + 1, "sector": 2 * dims + 1}.get(name, 3)
    count += rng.choices([0, 1, -1], [10, 1, 1])[0]  # now and then one too many or too few
    if name == "box" and rng.random() < 0.7:  # mostly lo <= hi, or every box would be refused
        lo = [rng.randint(-5, 5) for _ in range(dims)]
        values = [*map(str, lo), *(str(v + rng.randint(0, 9)) for v in lo)][:count]
    else:
        values = [number(rng) for _ in range(count)]
    space = rng.choice(["", " "])
    return f"{name}:{space}{(',' + space).join(values)}"


def region(rng: random.Random) -> str:
    def union() -> str:
        return " | ".join(primitive(rng) for _ in range(rng.choice([1, 1, 2, 3])))

    text = " & ".join(union() for _ in range(rng.choice([1, 1, 1, 2])))
    if rng.random() < 0.2:
        text = f"rel:{rng.choice(['42', '-7', 'car_1', json.dumps('a b'), ''])}:{text}"
    return rng.choices([text, f"  {text} ", f"{text} junk"], [6, 3, 1])[0]


def agree(text: str, page: dict[str, Any]) -> bool:
    """Whether the page read ``text`` as fanout.views.text does: the same view (as the wire has
    it), or a refusal. An intersection whose parts' bounds do not meet is the one difference:
    the client's ``meet`` does not check that (the relay does, refusing it when subscribed)."""
    try:
        view = parse_region(text)
    except InvalidView as exc:
        empty = "(its parts' bounds do not meet)" in str(exc)
        return page == {"error": "InvalidView"} or (empty and page["view"]["kind"] == "meet")
    return page == {"view": msgspec.json.decode(msgspec.json.encode(view))}


async def test_regions_typed_in_are_read_as_fanout_views_text_reads_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from fanout.testing.browser import open_browser

    rng = random.Random(42)
    texts = [region(rng) for _ in range(400)]
    texts += ["", "box", "box:", "box:0,0,1,1,", "rel:1:box:0,0,1,1&box:0,0,1,1"]
    publisher = ScriptedPublisher(catalog())
    async with serving(publisher) as url, running_relay(url) as (_, relay_url):
        base = relay_url.replace("ws://", "http://")
        async with open_browser(f"{base}/?dataset=agents", tmp_path / "browser") as page:
            read = json.loads(
                await page.evaluate(PARSE % json.dumps([[t, "region"] for t in texts]))
            )
            members = [
                ["plant/+/temp | yard/#", "topic"], ["/cars/.all | /vans/v1", "path"],
                ["a|b", "topic"], ["SELECT 1 | 2 FROM t", "sql"],
            ]  # fmt: skip
            split = json.loads(await page.evaluate(PARSE % json.dumps(members)))
    for text, got in zip(texts, read, strict=True):
        assert agree(text, got), (text, got)
    valid = sum("view" in got for got in read)
    assert 80 < valid < len(texts) - 80, valid  # the mix holds many of each
    assert [got["view"] for got in split] == [
        {"kind": "any", "views": [{"kind": "topic", "filter": "plant/+/temp"},
                                  {"kind": "topic", "filter": "yard/#"}]},
        {"kind": "any", "views": [{"kind": "path", "path": "/cars/.all"},
                                  {"kind": "path", "path": "/vans/v1"}]},
        {"kind": "topic", "filter": "a|b"},  # no spaces: one filter
        {"kind": "sql", "text": "SELECT 1 | 2 FROM t"},  # SQL is the query's own text
    ]  # fmt: skip
