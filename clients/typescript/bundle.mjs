// The client for browsers as one ES module, @msgpack/msgpack inside: esbuild bundles src/
// into the Python package's viewer directory, where every relay serves it at /fanout-client.js
// (the viewer at / imports it; so may any page). The file is committed, so that `pip install`
// users need no Node.js. `npm run build` writes it; `node bundle.mjs --check` fails if the
// committed file is not what the sources make now; `--stdout` prints what they make
// (tests/clients/test_bundle.py compares it with the committed file).
import { readFile, writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const here = (path) => fileURLToPath(new URL(path, import.meta.url));
const OUTPUT = here("../../src/fanout/http/viewer/fanout-client.js");
const { version } = JSON.parse(await readFile(here("package.json"), "utf8"));

/** The bundle's text, made in memory (the same bytes on every machine for one esbuild version). */
async function bundle() {
  const result = await build({
    absWorkingDir: here("."),
    entryPoints: ["src/index.ts"],
    bundle: true,
    format: "esm",
    platform: "browser",
    target: "es2022",
    charset: "utf8",
    legalComments: "inline",
    write: false,
    banner: {
      js: `// @fanout/client ${version} for browsers, made by clients/typescript/bundle.mjs (npm run build)\n// from clients/typescript/src and @msgpack/msgpack: do not edit, rebuild.`,
    },
  });
  // esbuild names the files it read by their paths from here (absWorkingDir): the same anywhere.
  return result.outputFiles[0].text;
}

const made = await bundle();
if (process.argv.includes("--stdout")) {
  process.stdout.write(made);
} else if (process.argv.includes("--check")) {
  const committed = await readFile(OUTPUT, "utf8").catch(() => "");
  if (committed !== made) {
    console.error(`${OUTPUT} is not what clients/typescript/src makes now: run npm run build and commit it`);
    process.exit(1);
  }
  console.log(`${OUTPUT} is up to date`);
} else {
  await writeFile(OUTPUT, made);
  console.log(`wrote ${OUTPUT} (${made.length} characters)`);
}
