#!/usr/bin/env bash
# tools/fetch_tiktoken.sh — the ranks of the cl100k_base and o200k_base encodings, as shipped by the
# npm package js-tiktoken (the one tools/fetch_gpt2.sh fetches with `npm pack`, pinned there; its
# JavaScript encoder is also the tests' reference for these encodings).
#
#   tools/fetch_tiktoken.sh OUT_DIR [PACKAGE_DIR]     (PACKAGE_DIR default: data/gpt2)
#
# PACKAGE_DIR holds node_modules/js-tiktoken; if it does not, tools/fetch_gpt2.sh PACKAGE_DIR is run
# first. Writes OUT_DIR/cl100k_base.tiktoken (ranks 0..100255) and OUT_DIR/o200k_base.tiktoken
# (ranks 0..199997) in tiktoken's text format, one "base64(token bytes) rank" line per rank (the
# special tokens are not ranks). Each file's SHA-256 is checked against the hash OpenAI's tiktoken
# publishes for it, so the files are byte for byte the official ones. llmtrain-prep --tokenizer
# cl100k_base | o200k_base reads them (--tiktoken-dir, default data/tiktoken).
# Idempotent: a file that exists is not written again.
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 OUT_DIR [PACKAGE_DIR]" >&2
  exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$1
PKG=${2:-$ROOT/data/gpt2}
# tiktoken's expected_hash for https://openaipublic.blob.core.windows.net/encodings/<name>.tiktoken
declare -A SHA256=(
  [cl100k_base]=223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7
  [o200k_base]=446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d
)
declare -A COUNT=([cl100k_base]=100256 [o200k_base]=199998)

[ -f "$PKG/node_modules/js-tiktoken/package.json" ] || "$ROOT/tools/fetch_gpt2.sh" "$PKG"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
for name in cl100k_base o200k_base; do
  [ -f "$OUT/$name.tiktoken" ] && continue
  command -v node >/dev/null || { echo "fetch_tiktoken: node is missing (apt-get install nodejs)" >&2; exit 1; }
  # The package stores the ranks as lines "<label> <first rank> <base64 token> <base64 token> ...":
  # consecutive tokens get consecutive ranks. Written out as tiktoken's "base64 rank" lines.
  (cd "$PKG" && NAME=$name COUNT=${COUNT[$name]} TMP="$OUT/$name.tiktoken.tmp" node --input-type=module -e '
    import { writeFileSync } from "node:fs";
    const { default: ranks } = await import(`js-tiktoken/ranks/${process.env.NAME}`);
    const lines = [];
    for (const line of ranks.bpe_ranks.split("\n").filter(Boolean)) {
      const [, first, ...tokens] = line.split(" ");
      tokens.forEach((t, i) => { lines[Number(first) + i] = `${t} ${Number(first) + i}\n`; });
    }
    const n = Number(process.env.COUNT);
    if (lines.length !== n || lines.includes(undefined)) throw new Error(`expected ranks 0..${n - 1}`);
    writeFileSync(process.env.TMP, lines.join(""));
  ')
  sum=$(sha256sum "$OUT/$name.tiktoken.tmp" | cut -d" " -f1)
  if [ "$sum" != "${SHA256[$name]}" ]; then
    echo "fetch_tiktoken: the $name ranks from $PKG/node_modules/js-tiktoken have SHA-256 $sum, expected ${SHA256[$name]}" >&2
    rm -f "$OUT/$name.tiktoken.tmp"
    exit 1
  fi
  mv "$OUT/$name.tiktoken.tmp" "$OUT/$name.tiktoken"
  echo "fetch_tiktoken: wrote $OUT/$name.tiktoken (${COUNT[$name]} ranks, SHA-256 $sum = tiktoken's $name)"
done
