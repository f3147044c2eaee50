// tests/data/tiktoken_reference.mjs — the reference encoder of the tiktoken family: the npm package
// js-tiktoken's own JavaScript Tiktoken class with its ranks for ENCODING (gpt2, cl100k_base,
// o200k_base; the package is fetched by tools/fetch_gpt2.sh).
//
//   node tiktoken_reference.mjs PACKAGE_DIR ENCODING FILE...          one line of ids per file
//   node tiktoken_reference.mjs --bench PACKAGE_DIR ENCODING FILE...  "tokens N bytes B seconds S" of
//                                                                     a second pass (the first warms V8's JIT)
//   node tiktoken_reference.mjs --pattern PACKAGE_DIR ENCODING        the package's pat_str
//
// PACKAGE_DIR holds node_modules/js-tiktoken. Files are decoded as strict UTF-8 and encoded like
// tiktoken's encode_ordinary (allowed and disallowed special tokens empty: their text is ordinary text).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const args = process.argv.slice(2);
const mode = args[0] === "--bench" || args[0] === "--pattern" ? args.shift() : "";
const require = createRequire(path.resolve(args[0], "node_modules") + "/");
const { Tiktoken } = require("js-tiktoken/lite");
const ranksModule = require(`js-tiktoken/ranks/${args[1]}`);
const ranks = ranksModule.default ?? ranksModule;
if (mode === "--pattern") {
  console.log(ranks.pat_str);
  process.exit(0);
}
const enc = new Tiktoken(ranks);
const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });  // keep a leading U+FEFF as text
const files = args.slice(2);
const texts = files.map((f) => decoder.decode(readFileSync(f)));
if (mode === "--bench") {
  let tokens = 0, bytes = 0;
  for (const t of texts) enc.encode(t, [], []);
  const t0 = process.hrtime.bigint();
  for (const t of texts) tokens += enc.encode(t, [], []).length;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  for (const f of files) bytes += readFileSync(f).length;
  console.log(`tokens ${tokens} bytes ${bytes} seconds ${s.toFixed(6)}`);
} else {
  const out = texts.map((t) => enc.encode(t, [], []).join(" "));
  process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
}
