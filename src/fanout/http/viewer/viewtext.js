// Views typed in the viewer, in the language of their dataset (`GET /v1/datasets`' `view`),
// built with @fanout/client's builders: regions in the text syntax of fanout.views.text
// ("box:0,0,10,10", "sphere:5,5,3|box:...", "a & b", "rel:42:sector:..."), SQL queries, topic
// filters and object paths as they are ("a | b": any of two filters or paths). A mistake
// throws the client's InvalidView (or this parser's, naming the column), shown in the page.
import { anyOf, box, InvalidView, meet, path, relative, sector, sphere, sql, topic, union } from "./fanout-client.js";

const NUMBER = /[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?/y;
const BARE_KEY = /[A-Za-z0-9_.-]+/y;
const INTEGER = /^[+-]?\d+$/;
const SHAPES = { box: [4, 6], sphere: [3, 4], sector: [5, 7] };  // numbers in 2-D, in 3-D

/** The view `text` means in a dataset whose views are in `language`. */
export function parseView(text, language) {
  switch (language) {
    case "region": return parseRegion(text);
    case "sql": return sql(text);
    case "topic": return members(text, topic);
    case "path": return members(text, path);
  }
  throw new InvalidView(`this viewer cannot write views in ${language}`);
}

function members(text, make) {
  const parts = text.split(/\s+\|\s+/);
  return parts.length > 1 ? anyOf(...parts.map((part) => make(part.trim()))) : make(text.trim());
}

/** A region from its text (fanout.views.text's grammar). */
export function parseRegion(text) {
  const cursor = { text, at: 0 };
  let region;
  skip(cursor);
  if (text.startsWith("rel:", cursor.at)) {
    cursor.at += 4;
    const entity = entityKey(cursor);
    expect(cursor, ":");
    region = relative(entity, unionOf(cursor));
  } else {
    const parts = [unionOf(cursor)];
    while (skip(cursor) === "&") {
      cursor.at += 1;
      parts.push(unionOf(cursor));
    }
    region = parts.length > 1 ? meet(...parts) : parts[0];
  }
  if (skip(cursor) !== "") throw error(cursor, `unexpected ${JSON.stringify(text.slice(cursor.at, cursor.at + 12))}`);
  return region;
}

function unionOf(cursor) {
  const members = [primitive(cursor)];
  while (skip(cursor) === "|") {
    cursor.at += 1;
    members.push(primitive(cursor));
  }
  return members.length > 1 ? union(...members) : members[0];
}

function primitive(cursor) {
  skip(cursor);
  const name = /^[A-Za-z]*/.exec(cursor.text.slice(cursor.at))[0];
  if (!(name in SHAPES)) throw error(cursor, "expected box, sphere or sector");
  cursor.at += name.length;
  expect(cursor, ":");
  const numbers = [number(cursor)];
  while (skip(cursor) === ",") {
    cursor.at += 1;
    numbers.push(number(cursor));
  }
  const [two, three] = SHAPES[name];
  if (numbers.length !== two && numbers.length !== three) {
    throw error(cursor, `${name} takes ${two} numbers (2-D) or ${three} (3-D), got ${numbers.length}`);
  }
  const d = numbers.length === two ? 2 : 3;
  if (name === "box") return box(numbers.slice(0, d), numbers.slice(d));
  if (name === "sphere") return sphere(numbers.slice(0, d), numbers[d]);
  const heading = d === 2 ? numbers[d + 1] : [numbers[d + 1], numbers[d + 2]];
  return sector(numbers.slice(0, d), numbers[d], heading, numbers[numbers.length - 1]);
}

function number(cursor) {
  skip(cursor);
  NUMBER.lastIndex = cursor.at;
  const found = NUMBER.exec(cursor.text);
  if (found === null) throw error(cursor, "expected a number");
  cursor.at = NUMBER.lastIndex;
  return Number(found[0]);
}

function entityKey(cursor) {
  if (cursor.text[cursor.at] === '"') {
    const end = cursor.text.indexOf('"', cursor.at + 1);
    if (end < 0) throw error(cursor, "an unended quoted entity key");
    const key = JSON.parse(cursor.text.slice(cursor.at, end + 1));
    cursor.at = end + 1;
    return key;
  }
  BARE_KEY.lastIndex = cursor.at;
  const found = BARE_KEY.exec(cursor.text);
  if (found === null) throw error(cursor, "expected an entity key");
  cursor.at = BARE_KEY.lastIndex;
  return INTEGER.test(found[0]) ? Number(found[0]) : found[0];
}

function expect(cursor, separator) {
  if (!cursor.text.startsWith(separator, cursor.at)) throw error(cursor, `expected ${JSON.stringify(separator)}`);
  cursor.at += separator.length;
}

/** Skip whitespace; the next character ("" at the end). */
function skip(cursor) {
  while (cursor.at < cursor.text.length && /\s/.test(cursor.text[cursor.at])) cursor.at += 1;
  return cursor.text.slice(cursor.at, cursor.at + 1);
}

function error(cursor, problem) {
  return new InvalidView(`region ${JSON.stringify(cursor.text)}: ${problem} at column ${cursor.at + 1}`);
}
