#!/usr/bin/env bash
# tools/bench/tiktoken_tokenizer_bench.sh — cl100k_base and o200k_base throughput: our encoder
# (data/tiktoken_bpe.cpp, via tests/data/encode_tool) against the reference, js-tiktoken's
# JavaScript encoder under node, in the same run on the same text (the Brown corpus, 500 files),
# one core each; then llmtrain-prep with each encoding on every core (reading, encoding, writing).
#
#   tools/bench/tiktoken_tokenizer_bench.sh [BUILD_DIR] [RUNS]   (default build, 3 runs; needs
#                                     tools/setup.sh's data/gpt2, data/tiktoken and data/brown)
#
# Each encoder runs a warm-up pass and a timed pass over all files in memory (file reading not
# timed); the best of RUNS runs is reported. Prints tokens/s per core for both and their ratio.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
RUNS=${2:-3}
TOOL=$BUILD/tests/data/encode_tool
PREP=$BUILD/tools/prep/llmtrain-prep
for f in "$TOOL" "$PREP"; do
  [ -x "$f" ] || { echo "bench: $f is not built (cmake --build $BUILD --target encode_tool llmtrain-prep)" >&2; exit 1; }
done
[ -f "$ROOT/data/gpt2/node_modules/js-tiktoken/package.json" ] || { echo "bench: run tools/fetch_gpt2.sh data/gpt2 first" >&2; exit 1; }
[ -f "$ROOT/data/tiktoken/o200k_base.tiktoken" ] || { echo "bench: run tools/fetch_tiktoken.sh data/tiktoken first" >&2; exit 1; }
[ -f "$ROOT/data/brown/text/.complete" ] || { echo "bench: run tools/fetch_brown.sh data/brown first" >&2; exit 1; }
FILES=("$ROOT"/data/brown/text/*.txt)
JSV="$(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$ROOT/data/gpt2/node_modules/js-tiktoken/package.json")"
NODEV="$(node --version)"

# best of RUNS: the smallest "seconds" among lines "tokens N bytes B seconds S"
best() { sort -g -k6 | head -n 1; }
for enc in cl100k_base o200k_base; do
  ranks=$ROOT/data/tiktoken/$enc.tiktoken
  ours=$(for ((i = 0; i < RUNS; i++)); do taskset -c 0 "$TOOL" --bench "$enc" "$ranks" "${FILES[@]}"; done | best)
  js=$(for ((i = 0; i < RUNS; i++)); do
    taskset -c 0 node "$ROOT/tests/data/tiktoken_reference.mjs" --bench "$ROOT/data/gpt2" "$enc" "${FILES[@]}"
  done | best)
  read -r _ tok_o _ bytes _ s_o <<<"$ours"
  read -r _ tok_j _ _ _ s_j <<<"$js"
  [ "$tok_o" = "$tok_j" ] || { echo "bench: $enc token counts differ: ours $tok_o, js-tiktoken $tok_j" >&2; exit 1; }
  JSV=$JSV NODEV=$NODEV awk -v e="$enc" -v t="$tok_o" -v b="$bytes" -v so="$s_o" -v sj="$s_j" -v r="$RUNS" 'BEGIN {
    printf "%s on Brown: %d bytes, %d tokens; one core each (taskset -c 0), best of %d\n", e, b, t, r
    printf "  llmtrain TiktokenBpe (C++, PCRE2 JIT)  %10.0f tokens/s  %6.2f MB/s\n", t / so, b / so / 1e6
    printf "  js-tiktoken %s (node %s)     %10.0f tokens/s  %6.2f MB/s\n", ENVIRON["JSV"], ENVIRON["NODEV"], t / sj, b / sj / 1e6
    printf "  ratio ours / js-tiktoken: %.2fx\n", sj / so
  }'
done
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for enc in cl100k_base o200k_base; do
  echo "llmtrain-prep --tokenizer $enc on $(nproc) threads:"
  "$PREP" --tokenizer "$enc" --tiktoken-dir "$ROOT/data/tiktoken" --val-fraction 0 --out-dir "$OUT" \
    "$ROOT/data/brown/text/*.txt" | grep -E "^(tokens|encoding):" | sed 's/^/  /'
done
