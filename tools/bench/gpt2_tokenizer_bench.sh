#!/usr/bin/env bash
# tools/bench/gpt2_tokenizer_bench.sh — GPT-2 tokenizer throughput: our encoder (data/gpt2_bpe.cpp,
# via tests/data/encode_tool gpt2-bpe) against the reference, js-tiktoken's JavaScript encoder under
# node, in the same run on the same text (the Brown corpus, 500 files, 6.2 MB), one core each; then
# llmtrain-prep --tokenizer gpt2 on every core (reading, encoding and writing the HDF5 files).
#
#   tools/bench/gpt2_tokenizer_bench.sh [BUILD_DIR]     (default build; needs tools/setup.sh's data/gpt2, data/brown)
#
# Each encoder runs a warm-up pass and a timed pass over all files in memory (file reading not
# timed); the best of 3 runs is reported. Prints tokens/s per core for both and their ratio.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
TOOL=$BUILD/tests/data/encode_tool
PREP=$BUILD/tools/prep/llmtrain-prep
for f in "$TOOL" "$PREP"; do
  [ -x "$f" ] || { echo "bench: $f is not built (cmake --build $BUILD --target encode_tool llmtrain-prep)" >&2; exit 1; }
done
[ -f "$ROOT/data/gpt2/gpt2.tiktoken" ] || { echo "bench: run tools/fetch_gpt2.sh data/gpt2 first" >&2; exit 1; }
[ -f "$ROOT/data/brown/text/.complete" ] || { echo "bench: run tools/fetch_brown.sh data/brown first" >&2; exit 1; }
FILES=("$ROOT"/data/brown/text/*.txt)

# best of 3: the smallest "seconds" among lines "tokens N bytes B seconds S"
best() { sort -g -k6 | head -n 1; }
ours=$(for i in 1 2 3; do taskset -c 0 "$TOOL" --bench gpt2-bpe "$ROOT/data/gpt2/gpt2.tiktoken" "${FILES[@]}"; done | best)
js=$(for i in 1 2 3; do taskset -c 0 node "$ROOT/tests/data/gpt2_reference.mjs" --bench "$ROOT/data/gpt2" "${FILES[@]}"; done | best)
read -r _ tok_o _ bytes _ s_o <<<"$ours"
read -r _ tok_j _ _ _ s_j <<<"$js"
[ "$tok_o" = "$tok_j" ] || { echo "bench: token counts differ: ours $tok_o, js-tiktoken $tok_j" >&2; exit 1; }
JSV="$(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$ROOT/data/gpt2/node_modules/js-tiktoken/package.json")" NODEV="$(node --version)" \
awk -v t="$tok_o" -v b="$bytes" -v so="$s_o" -v sj="$s_j" 'BEGIN {
  printf "Brown: %d bytes, %d tokens; one core each (taskset -c 0), best of 3\n", b, t
  printf "  llmtrain Gpt2Bpe (C++, PCRE2 JIT)   %10.0f tokens/s  %6.2f MB/s\n", t / so, b / so / 1e6
  printf "  js-tiktoken %s (node %s) %10.0f tokens/s  %6.2f MB/s\n", ENVIRON["JSV"], ENVIRON["NODEV"], t / sj, b / sj / 1e6
  printf "  ratio ours / js-tiktoken: %.2fx\n", sj / so
}'
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "llmtrain-prep --tokenizer gpt2 on $(nproc) threads:"
"$PREP" --tokenizer gpt2 --gpt2-ranks "$ROOT/data/gpt2/gpt2.tiktoken" --val-fraction 0 --out-dir "$OUT" \
  "$ROOT/data/brown/text/*.txt" | grep -E "^(tokens|encoding):" | sed 's/^/  /'
