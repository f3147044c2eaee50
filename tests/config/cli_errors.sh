#!/usr/bin/env bash
# tests/config/cli_errors.sh — the llmtrain binary on bad input: every bad-config class exits 2 with
# "file:line:col: key: ..." on stderr, a bad flag exits 2, a missing data file or a metrics port in
# use exits 1; in every case the run directory is neither created nor changed. Also: --help,
# --version, --dry-run write nothing, and --print-config output loads back to the same text.
#
#   cli_errors.sh LLMTRAIN LLMTRAIN_PREP
# Reference: the exit codes and message format of docs/configuration.md; positions counted in the files below.
set -u
LLMTRAIN=$1
PREP=$2
PY=/usr/bin/python3
W=$(mktemp -d /tmp/llmtrain_cli_errors.XXXXXX)
LISTENER_PID=""
cleanup() {
  if [ -n "$LISTENER_PID" ]; then kill "$LISTENER_PID" 2>/dev/null; wait "$LISTENER_PID" 2>/dev/null; fi
  rm -rf "$W"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# A small corpus and dataset: 12 documents of fixed sentences (vocab 300 is enough for them).
mkdir -p "$W/text"
for d in $(seq 1 12); do
  for s in $(seq 1 40); do echo "Document $d sentence $s tells the quick brown fox to jump over the lazy dog."; done > "$W/text/d$d.txt"
done
"$PREP" --vocab-size 300 --val-fraction 0.2 --out-dir "$W/data" "$W/text/*.txt" > "$W/prep.log" 2>&1 ||
  { cat "$W/prep.log"; echo "FAIL: llmtrain-prep"; exit 1; }

# A valid base config; each case appends a section it lacks, or overrides a key. The run dir must never appear.
RUN="$W/run"
cat > "$W/base.toml" <<EOF
[run]
run_dir = "$RUN"
max_steps = 2
[model]
n_layer = 1
n_head = 2
n_embd = 32
seq_len = 16
vocab_size = 300
[data]
train = "$W/data/train.h5"
val = "$W/data/val.h5"
[training]
micro_batch_size = 2
[metrics]
listen = "127.0.0.1:0"
EOF

# expect CODE "substring" args... : runs llmtrain, checks the exit code, stderr and the run dir.
expect() {
  local code=$1 want=$2
  shift 2
  timeout 120 "$LLMTRAIN" "$@" > "$W/out" 2> "$W/err"
  local rc=$?
  if [ "$rc" != "$code" ]; then fail "exit $rc, expected $code: llmtrain $*"; sed 's/^/  /' "$W/err"; fi
  if ! grep -qF -- "$want" "$W/err"; then fail "stderr lacks '$want': llmtrain $*"; sed 's/^/  /' "$W/err"; fi
  if [ -e "$RUN" ]; then fail "run dir created by: llmtrain $*"; rm -rf "$RUN"; fi
}

# bad_file NAME LINE:COL "substring" TOML...: base.toml plus TOML lines appended at the end.
bad_file() {
  local name=$1 pos=$2 want=$3
  shift 3
  cp "$W/base.toml" "$W/$name.toml"
  printf '%s\n' "$@" >> "$W/$name.toml"
  expect 2 "$W/$name.toml:$pos: $want" --config "$W/$name.toml"
}

n=$(wc -l < "$W/base.toml")
l1=$((n + 1)); l2=$((n + 2))
bad_file unknown_section "$l1:2" "unknown section [optimiser]" "[optimiser]" "lr = 1.0"
bad_file unknown_key "$l2:1" "optimizer.lrr: unknown key (did you mean optimizer.lr?)" "[optimizer]" "lrr = 2"
bad_file wrong_section "$l2:1" "checkpoint.lr: unknown key (did you mean optimizer.lr?)" "[checkpoint]" "lr = 1.0"
bad_file float_for_int "$l2:13" "checkpoint.keep_last: expected an integer, got the float 1.5" "[checkpoint]" "keep_last = 1.5"
bad_file string_for_number "$l2:6" "optimizer.lr: expected a number, got the string \"3e-4\"" "[optimizer]" 'lr = "3e-4"'
bad_file bool_for_number "$l2:6" "optimizer.lr: expected a number, got the boolean true" "[optimizer]" "lr = true"
bad_file number_for_string "$l2:10" "checkpoint.resume: expected a string (in quotes), got the integer 16" "[checkpoint]" "resume = 16"
bad_file out_of_range "$l2:9" "optimizer.beta1: expected a number in [0, 1)" "[optimizer]" "beta1 = 1.0"
bad_file enum "$l2:9" "lr_schedule.decay: expected one of" "[lr_schedule]" 'decay = "exp"'
# Syntax errors: TOML++ picks the column; the line and the message are checked.
syntax_file() {
  local name=$1 line=$2
  shift 2
  cp "$W/base.toml" "$W/$name.toml"
  printf '%s\n' "$@" >> "$W/$name.toml"
  expect 2 "$W/$name.toml:$line:" --config "$W/$name.toml"
  grep -q "TOML syntax error" "$W/err" || fail "$name: no 'TOML syntax error' in: $(cat "$W/err")"
}
syntax_file duplicate_table "$l1" "[metrics]" 'listen = "127.0.0.1:1"'  # base.toml has [metrics]
syntax_file bad_value "$l2" "[parallel]" "dp = = 3"

expect 2 "--set metrics.listen=\"9400\": metrics.listen: expected \"host:port\"" --config "$W/base.toml" --set 'metrics.listen="9400"'
expect 2 "model.n_head: expected a divisor of model.n_embd (32), got 3" --config "$W/base.toml" --set model.n_head=3
expect 2 "--set run.max_stepz=...: unknown key (did you mean run.max_steps?)" --config "$W/base.toml" --set run.max_stepz=3
expect 2 "--set run.name=demo: run.name: the value is not valid TOML" --config "$W/base.toml" --set run.name=demo
expect 2 "training.global_batch_size: expected a multiple of micro_batch_size x grad_accum_steps = 2, got 3" \
  --config "$W/base.toml" --set training.global_batch_size=3
expect 2 "$W/missing.toml: cannot open config file: No such file or directory" --config "$W/missing.toml"
expect 2 "$W/text: cannot read config file: it is a directory" --config "$W/text"
expect 2 "The following argument was not expected: --bogus" --config "$W/base.toml" --bogus
expect 2 "--config: 1 required" --config

# Runtime input errors: exit 1, the message names the culprit, nothing written.
expect 1 "$W/nope.h5" --config "$W/base.toml" --set "data.train=\"$W/nope.h5\""
LISTEN_PORT_FILE="$W/port"
$PY -c "
import socket, sys, time
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)
open(sys.argv[1], 'w').write(str(s.getsockname()[1])); time.sleep(120)" "$LISTEN_PORT_FILE" &
LISTENER_PID=$!
for _ in $(seq 1 100); do [ -s "$LISTEN_PORT_FILE" ] && break; sleep 0.1; done
BUSY=$(cat "$LISTEN_PORT_FILE")
expect 1 "metrics.listen 127.0.0.1:$BUSY: cannot listen" --config "$W/base.toml" --set "metrics.listen=\"127.0.0.1:$BUSY\""

# Nothing lost: an existing run dir stays byte-identical after a bad start.
mkdir -p "$RUN" && echo "earlier run" > "$RUN/log.txt"
before=$(cd "$RUN" && find . -type f -exec sha256sum {} + | sort)
timeout 60 "$LLMTRAIN" --config "$W/base.toml" --set optimizer.lr=0 > /dev/null 2>&1
rc=$?
after=$(cd "$RUN" && find . -type f -exec sha256sum {} + | sort)
[ "$rc" = 2 ] || fail "lr=0 with an existing run dir: exit $rc, expected 2"
[ "$before" = "$after" ] || fail "a bad start changed the existing run dir"
rm -rf "$RUN"

# Success paths that must not write: --help, --version, --dry-run, --print-config.
for args in "--help" "--version" "--config $W/base.toml --dry-run" "--config $W/base.toml --print-config"; do
  # shellcheck disable=SC2086
  timeout 120 "$LLMTRAIN" $args > "$W/out" 2> "$W/err" || { fail "llmtrain $args exited non-zero"; cat "$W/err"; }
  [ -e "$RUN" ] && { fail "llmtrain $args created the run dir"; rm -rf "$RUN"; }
done
grep -q "^\[metrics\]$" "$W/out" || fail "--print-config printed no [metrics] section"
cp "$W/out" "$W/printed.toml"
timeout 60 "$LLMTRAIN" --config "$W/printed.toml" --print-config > "$W/printed2.toml" 2> "$W/err" || fail "printed config does not load"
cmp -s "$W/printed.toml" "$W/printed2.toml" || fail "--print-config of the printed config differs"

if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "cli_errors: all cases passed"
