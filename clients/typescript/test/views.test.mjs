// The view builders make what fanout.views encodes (fixtures/views.json), and refuse what its
// constructors refuse.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import * as fanout from "../dist/index.js";

const fixtures = JSON.parse(readFileSync(new URL("fixtures/views.json", import.meta.url)));

/** A builder call given as [name, ...arguments], nested calls as arrays starting with a name. */
function build([name, ...args]) {
  const nested = (arg) => (Array.isArray(arg) && typeof arg[0] === "string" && arg[0] in fanout ? build(arg) : arg);
  return fanout[name](...args.map(nested));
}

for (const { call, view } of fixtures) {
  test(`views: ${call[0]} is encoded as fanout.views encodes it (${JSON.stringify(view).slice(0, 60)})`, () => {
    assert.deepEqual(build(call), view);
  });
}

test("views: arguments fanout.views refuses are InvalidView", () => {
  const { InvalidView, anyOf, box, entity, relative, sector, sphere, sql, topic, union, path } = fanout;
  for (const bad of [
    () => box([0, 0], [1]),
    () => box([2, 0], [1, 1]),
    () => box([0, NaN], [1, 1]),
    () => box([0], [1]),
    () => sphere([0, 0], -1),
    () => sector([0, 0], 1, 0, 4),
    () => sector([0, 0, 0], 1, 0, 1),
    () => union(),
    () => union(box([0, 0], [1, 1]), sphere([0, 0, 0], 1)),
    () => relative("", sphere([0, 0], 1)),
    () => anyOf(topic("a"), topic("a")),
    () => anyOf(topic("a"), path("/b")),
    () => entity(true),
    () => sql(" "),
    () => topic("a/#/b"),
    () => topic("a/b#"),
    () => topic("a+/b"),
    () => topic("a\0b"),
    () => topic("$share//a"),
    () => topic("$share/g+/a"),
    () => topic("$share/g"),
    () => topic("$share/g/"),
  ]) {
    assert.throws(bad, InvalidView, String(bad));
  }
});
