// tests/data/gpt2_reference.mjs — the reference GPT-2 encoder: the npm package js-tiktoken's own
// JavaScript Tiktoken class with its "gpt2" ranks (fetched by tools/fetch_gpt2.sh).
//
//   node gpt2_reference.mjs PACKAGE_DIR FILE...          one line of ids per file (like encode_tool gpt2-bpe)
//   node gpt2_reference.mjs --bench PACKAGE_DIR FILE...  "tokens N bytes B seconds S" of a second pass
//                                                        (the first warms V8's JIT), reading not timed
//
// PACKAGE_DIR holds node_modules/js-tiktoken. Files are decoded as strict UTF-8 (the test only gives
// valid UTF-8 here) and encoded like tiktoken's encode_ordinary: "<|endoftext|>" is ordinary text.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const args = process.argv.slice(2);
const bench = args[0] === "--bench";
if (bench) args.shift();
const require = createRequire(path.resolve(args[0], "node_modules") + "/");
const { Tiktoken } = require("js-tiktoken/lite");
const ranks = require("js-tiktoken/ranks/gpt2");
const enc = new Tiktoken(ranks.default ?? ranks);
const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });  // keep a leading U+FEFF as text
const texts = args.slice(1).map((f) => decoder.decode(readFileSync(f)));
if (bench) {
  let tokens = 0, bytes = 0;
  for (const t of texts) enc.encode(t, [], []);
  const t0 = process.hrtime.bigint();
  for (const t of texts) tokens += enc.encode(t, [], []).length;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  for (const f of args.slice(1)) bytes += readFileSync(f).length;
  console.log(`tokens ${tokens} bytes ${bytes} seconds ${s.toFixed(6)}`);
} else {
  const out = texts.map((t) => enc.encode(t, [], []).join(" "));
  process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
}
