#!/usr/bin/env bash
# tests/metrics/prometheus_test.sh — a real training run watched from outside: curl scrapes its
# /metrics while it trains, then Debian's prometheus server scrapes it every second and the test asks
# prometheus's HTTP API for llmtrain_loss. SIGTERM stops the run (exit 0, checkpoint saved); started
# again it resumes, counted as restart 1 in the log, llmtrain_restarts_total and state.toml.
#
#   prometheus_test.sh LLMTRAIN LLMTRAIN_PREP [PROMETHEUS]     (PROMETHEUS defaults to /usr/bin/prometheus)
# Loopback addresses only; every wait is bounded; every process started here is stopped by its pid.
set -u
LLMTRAIN=$1
PREP=$2
PROMETHEUS=${3:-/usr/bin/prometheus}
PY=/usr/bin/python3
W=$(mktemp -d /tmp/llmtrain_prometheus.XXXXXX)
TRAIN_PID=""
PROM_PID=""
stop() {  # stop PID: SIGTERM, then SIGKILL after 10 s
  local pid=$1
  [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}
cleanup() {
  stop "$PROM_PID"
  stop "$TRAIN_PID"
  rm -rf "$W"
}
trap cleanup EXIT
die() {
  echo "FAIL: $*"
  for f in "$W/train.log" "$W/prom.log"; do [ -f "$f" ] && { echo "--- tail of $f"; tail -n 20 "$f"; }; done
  exit 1
}
[ -x "$PROMETHEUS" ] || die "no prometheus server at $PROMETHEUS (apt-get install prometheus)"

# A tiny dataset: 12 documents of fixed sentences, vocab 300.
mkdir -p "$W/text"
for d in $(seq 1 12); do
  for s in $(seq 1 40); do echo "Document $d sentence $s tells the quick brown fox to jump over the lazy dog."; done > "$W/text/d$d.txt"
done
"$PREP" --vocab-size 300 --val-fraction 0.2 --out-dir "$W/data" "$W/text/*.txt" > "$W/prep.log" 2>&1 || die "llmtrain-prep"
# Two HellaSwag-format items short enough for seq_len 16, scored at every step (run.eval_hellaswag_interval).
# (this 300-piece tokenizer is nearly one piece per letter: the longest row is 11 tokens).
printf '%s\n' "lazy" 0 "dog" "fox" "jump" "over" "brown" 1 "dog" "fox" "the" "over" > "$W/items.txt"

# A tiny model that trains "forever" (it is stopped with SIGTERM) on an OS-picked metrics port.
cat > "$W/run.toml" <<EOF
[run]
name = "promtest"
run_dir = "$W/run"
max_steps = 1000000
log_interval = 100
eval_interval = 0
eval_hellaswag_interval = 1
sample_interval = 0
[model]
n_layer = 1
n_head = 2
n_embd = 32
seq_len = 16
vocab_size = 300
[data]
train = "$W/data/train.h5"
val = "$W/data/val.h5"
hellaswag = "$W/items.txt"
[training]
micro_batch_size = 2
[optimizer]
lr = 1e-3
[lr_schedule]
warmup_steps = 10
min_lr = 1e-4
[checkpoint]
interval = 0
[metrics]
listen = "127.0.0.1:0"
EOF
OMP_NUM_THREADS=1 "$LLMTRAIN" --config "$W/run.toml" > "$W/train.log" 2>&1 &
TRAIN_PID=$!

# 1. The port from the log line "metrics: listening on http://127.0.0.1:PORT/metrics" (<= 60 s).
PORT=""
for _ in $(seq 1 600); do
  PORT=$(sed -n 's|^metrics: listening on http://127\.0\.0\.1:\([0-9]*\)/metrics$|\1|p' "$W/train.log" | head -n 1)
  [ -n "$PORT" ] && break
  kill -0 "$TRAIN_PID" 2>/dev/null || die "llmtrain exited before listening"
  sleep 0.1
done
[ -n "$PORT" ] || die "no 'metrics: listening on' line within 60 s"
echo "llmtrain metrics on port $PORT"

# 2. curl while it trains: wait for step >= 2, then check every family and the labels.
L='rank="0",run="promtest"'
ok=""
for _ in $(seq 1 300); do
  curl -sf --max-time 5 "http://127.0.0.1:$PORT/metrics" > "$W/scrape.txt" || die "curl /metrics failed"
  step=$(sed -n "s|^llmtrain_step{$L} \([0-9.e+]*\)$|\1|p" "$W/scrape.txt")
  if [ -n "$step" ] && $PY -c "import sys; sys.exit(0 if float('$step') >= 2 else 1)"; then ok=1; break; fi
  sleep 0.2
done
[ -n "$ok" ] || die "llmtrain_step did not reach 2 within 60 s"
for name in llmtrain_step llmtrain_loss llmtrain_learning_rate llmtrain_grad_norm llmtrain_tokens_total \
            llmtrain_step_seconds_count llmtrain_step_seconds_sum; do
  grep -q "^$name{$L} [0-9]" "$W/scrape.txt" || die "$name{$L} missing from the scrape"
done
grep -q "^llmtrain_step_seconds_bucket{$L,le=\"+Inf\"} [0-9]" "$W/scrape.txt" || die "step_seconds buckets missing"
grep -q "^llmtrain_memory_bytes{$L,category=\"params\"} [0-9]" "$W/scrape.txt" || die "memory_bytes{category=params} missing"
grep -q "^llmtrain_restarts_total{$L} 0$" "$W/scrape.txt" || die "llmtrain_restarts_total{$L} is not 0 at a start from scratch"
# HellaSwag over 2 items: each accuracy is 0, 0.5 or 1.
for norm in none tokens; do
  acc=$(sed -n "s|^llmtrain_eval_hellaswag_accuracy{norm=\"$norm\",$L} \(.*\)$|\1|p;s|^llmtrain_eval_hellaswag_accuracy{$L,norm=\"$norm\"} \(.*\)$|\1|p" "$W/scrape.txt")
  $PY -c "import sys; sys.exit(0 if '$acc' and float('$acc') in (0, 0.5, 1) else 1)" ||
    die "llmtrain_eval_hellaswag_accuracy{norm=\"$norm\"} = '$acc', expected 0, 0.5 or 1 (2 items)"
done
grep -q "hellaswag acc [0-9.]* acc_norm [0-9.]* (2 items)" "$W/train.log" || die "no hellaswag line in the log"
# The loss of a model over 300 tokens starts near ln(300) = 5.7 and must be a finite positive number.
loss=$(sed -n "s|^llmtrain_loss{$L} \(.*\)$|\1|p" "$W/scrape.txt")
$PY -c "import math,sys; v=float('$loss'); sys.exit(0 if math.isfinite(v) and 0 < v < 10 else 1)" ||
  die "llmtrain_loss = $loss is not a plausible loss"
# tokens_total = step x tokens per step (2 sequences x 16 tokens), read from one scrape.
tokens=$(sed -n "s|^llmtrain_tokens_total{$L} \(.*\)$|\1|p" "$W/scrape.txt")
$PY -c "import sys; sys.exit(0 if abs(float('$tokens') - 32 * float('$step')) < 0.5 else 1)" ||
  die "llmtrain_tokens_total = $tokens, expected 32 x step ($step)"

# 3. Prometheus: scrape every second, query llmtrain_loss through the HTTP API (<= 60 s).
PROM_PORT=$($PY -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
cat > "$W/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: llmtrain
    static_configs:
      - targets: ["127.0.0.1:$PORT"]
EOF
"$PROMETHEUS" --config.file="$W/prometheus.yml" --storage.tsdb.path="$W/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" > "$W/prom.log" 2>&1 &
PROM_PID=$!
found=""
for _ in $(seq 1 120); do
  kill -0 "$PROM_PID" 2>/dev/null || die "prometheus exited"
  if curl -sf --max-time 5 "http://127.0.0.1:$PROM_PORT/api/v1/query?query=llmtrain_loss" > "$W/query.json"; then
    if $PY - "$W/query.json" <<'EOF'
import json, math, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "success", r
samples = r["data"]["result"]
if not samples:
    sys.exit(1)  # not ingested yet
s = samples[0]
assert s["metric"]["__name__"] == "llmtrain_loss", s
assert s["metric"]["run"] == "promtest" and s["metric"]["rank"] == "0", s["metric"]
assert s["metric"]["job"] == "llmtrain", s["metric"]
v = float(s["value"][1])
assert math.isfinite(v) and 0 < v < 10, v
print("prometheus ingested", s["metric"], "value", v)
EOF
    then found=1; break; fi
  fi
  sleep 0.5
done
[ -n "$found" ] || die "prometheus did not ingest llmtrain_loss within 60 s (last answer: $(cat "$W/query.json" 2>/dev/null))"

# 4. SIGTERM: the run stops at a step, saves a checkpoint and exits 0.
kill -TERM "$TRAIN_PID"
rc=""
for _ in $(seq 1 300); do
  if ! kill -0 "$TRAIN_PID" 2>/dev/null; then wait "$TRAIN_PID"; rc=$?; break; fi
  sleep 0.1
done
[ -n "$rc" ] || die "llmtrain did not stop within 30 s of SIGTERM"
TRAIN_PID=""
[ "$rc" = 0 ] || die "llmtrain exited $rc after SIGTERM, expected 0"
ls -d "$W"/run/checkpoints/step_* > /dev/null 2>&1 || die "no checkpoint after SIGTERM"

# 5. Started again, the run resumes from that checkpoint: the log says "restart 1 of this run" and
#    llmtrain_restarts_total is 1; stopped again the same way.
OMP_NUM_THREADS=1 "$LLMTRAIN" --config "$W/run.toml" > "$W/train.log" 2>&1 &
TRAIN_PID=$!
PORT=""
for _ in $(seq 1 600); do
  PORT=$(sed -n 's|^metrics: listening on http://127\.0\.0\.1:\([0-9]*\)/metrics$|\1|p' "$W/train.log" | head -n 1)
  [ -n "$PORT" ] && grep -q "^resume: from .*, restart 1 of this run" "$W/train.log" && break
  kill -0 "$TRAIN_PID" 2>/dev/null || die "llmtrain exited before resuming"
  sleep 0.1
done
grep -q "^resume: from .*, restart 1 of this run" "$W/train.log" || die "no 'resume: ... restart 1 of this run' line within 60 s"
restarts=""
for _ in $(seq 1 300); do
  curl -sf --max-time 5 "http://127.0.0.1:$PORT/metrics" > "$W/scrape.txt" || die "curl /metrics failed after the resume"
  restarts=$(sed -n "s|^llmtrain_restarts_total{$L} \(.*\)$|\1|p" "$W/scrape.txt")
  [ -n "$restarts" ] && grep -q "^llmtrain_step{$L} " "$W/scrape.txt" && break
  sleep 0.2
done
[ "$restarts" = 1 ] || die "llmtrain_restarts_total = '$restarts' after one resume, expected 1"
kill -TERM "$TRAIN_PID"
rc=""
for _ in $(seq 1 300); do
  if ! kill -0 "$TRAIN_PID" 2>/dev/null; then wait "$TRAIN_PID"; rc=$?; break; fi
  sleep 0.1
done
TRAIN_PID=""
[ "$rc" = 0 ] || die "the resumed llmtrain exited '$rc' after SIGTERM, expected 0"
grep -q "^restarts = 1$" "$W/run/checkpoints/$(cat "$W/run/checkpoints/latest")/state.toml" ||
  die "the resumed run's checkpoint does not say restarts = 1"
echo "prometheus_test: passed"
