#!/usr/bin/env bash
# convgen tune end to end: errors, the records it writes, resuming after kill -9 without
# repeating a trial, the lock, a torn line repaired, consumers applying the records
# (compile-layer's manifest names them), and a tuned trainer giving the same bits on
# 1, 2 and 3 threads.
set -uo pipefail
convgen="$1"
root="$2"
# shellcheck source=../cli/helpers.sh
source "$root/tests/cli/helpers.sh"

layer='mb4ic16ih12oc32oh12kh3ph1+relu'
key_count() { grep -c "\"kind\":\"$2\"" "$1" || true; }
# Duplicate (key, schedule) among the trial lines of a records file: none expected.
duplicate_trials() {
  python3 - "$1" <<'EOF'
import json, sys
seen, dup = set(), 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["kind"] != "trial":
        continue
    k = json.dumps([r["key"], r["schedule"], r["tuning"]["provenance"]], sort_keys=True)
    dup += k in seen
    seen.add(k)
print(dup)
EOF
}

# --- errors ---------------------------------------------------------------------------
"$convgen" tune --help >"$work/help" || fail "tune --help exited non-zero"
grep -q "usage: convgen tune" "$work/help" || fail "tune --help: no usage line"
expect_error 2 "--records" tune "$layer"
expect_error 2 "nothing to tune" tune --records "$work/r.jsonl"
expect_error 2 "--per-call-batch is for inference models" tune "$root/models/lenet.onnx" --train --per-call-batch 2 \
  --records "$work/r.jsonl"
expect_error 2 "--passes" tune "$layer" --records "$work/r.jsonl" --passes fwd,backward
expect_error 2 "--train needs a model" tune "$layer" --records "$work/r.jsonl" --train
expect_error 2 "--search" tune "$layer" --records "$work/r.jsonl" --search annealing
expect_error 2 "--budget" tune "$layer" --records "$work/r.jsonl" --budget 5x
expect_error 2 "at most 64" tune "$layer" --records "$work/r.jsonl" --jobs 65
expect_error 4 "missing.tsv" tune "$work/missing.tsv" --records "$work/r.jsonl"
expect_error 2 "inference only" tune "$layer+residual" --records "$work/r.jsonl"
[[ -e "$work/r.jsonl" ]] && fail "a refused command created the records file"

# --- a run, and the same command again ---------------------------------------------------
"$convgen" tune "$layer" --records "$work/r.jsonl" --trials 5 --log "$work/log.jsonl" >"$work/out" 2>"$work/err" ||
  fail "tune exited non-zero: $(cat "$work/err")"
[[ $(key_count "$work/r.jsonl" trial) -eq 15 ]] || fail "want 15 trial lines (3 passes x 5), got $(key_count "$work/r.jsonl" trial)"
[[ $(key_count "$work/r.jsonl" schedule) -eq 3 ]] || fail "want 3 tuned lines"
grep -q "geomean gain" "$work/out" || fail "no final table: $(cat "$work/out")"
# A descriptor's forward and backward-data candidates are timed on weights packed once (as
# convgen-bench and compile run them; the layer is GEMM); backward-weights reads none.
python3 - "$work/r.jsonl" <<'EOF' || fail "weights modes of the trials"
import json, sys
modes = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    s, p = r["schedule"], r["key"]["pass"]
    want = "prepacked" if p != "bwd_weights" and s["strategy"] == "gemm" else "per_call"
    if s["pack_weights"] != want:
        print(f"{p} {s}: want pack_weights {want}"); sys.exit(1)
    modes.setdefault(p, set()).add(s["pack_weights"])
if modes.get("fwd") != {"prepacked"} or modes.get("bwd_data") != {"prepacked"}:
    print(f"weights modes {modes}: the GEMM layer's forward and backward-data not timed packed"); sys.exit(1)
EOF
[[ $(grep -c '"event":"trial"' "$work/log.jsonl") -eq 15 ]] || fail "--log: want 15 trial events"
before=$(wc -l <"$work/r.jsonl")
"$convgen" tune "$layer" --records "$work/r.jsonl" --trials 5 >"$work/out" 2>"$work/err" || fail "second run failed"
[[ $(wc -l <"$work/r.jsonl") -eq $before ]] || fail "the same command again appended lines"
[[ $(grep -c "already tuned" "$work/err") -eq 3 ]] || fail "the second run did not say 'already tuned': $(cat "$work/err")"

# --- consumers ----------------------------------------------------------------------------
tuned=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["kind"] == "schedule" and r["key"]["pass"] == "fwd": s = r["schedule"]
# pack_weights is how the tuner passed weights; a consumer decides what its kernel reads.
print(" ".join([s["strategy"]] + [f"{k}={v}" for k, v in s.items() if k not in ("strategy", "pack_weights")]))' "$work/r.jsonl")
"$convgen" schedule "$layer" --target host --schedules "$work/r.jsonl" >"$work/sched" 2>&1 ||
  fail "schedule --schedules failed: $(cat "$work/sched")"
grep -q -- "pack_weights=per_call" "$work/sched" || fail "schedule --schedules: not per_call: $(cat "$work/sched")"
for word in $tuned; do
  grep -q -- "$word" "$work/sched" || fail "schedule --schedules does not print the tuned $word: $(cat "$work/sched")"
done
"$convgen" compile-layer "$layer" --target host --schedules "$work/r.jsonl" -o "$work/k" --name k >/dev/null 2>"$work/err" ||
  fail "compile-layer --schedules failed: $(cat "$work/err")"
grep -q "record in" "$work/k/k.manifest.json" || fail "the manifest does not name the record: $(cat "$work/k/k.manifest.json")"

# An inference model: its forward kernels at --batch, as compile plans them; compile
# --schedules builds them with the records (its manifest says so).
cifar="$root/models/cifar10_full.onnx"
"$convgen" tune "$cifar" --batch 2 --records "$work/m.jsonl" --trials 2 >/dev/null 2>"$work/err" ||
  fail "tune MODEL failed: $(cat "$work/err")"
[[ $(key_count "$work/m.jsonl" schedule) -eq 4 ]] || fail "tune MODEL: want 4 forward kernels (3 Conv layers, the Gemm as a 1x1 Conv)"
grep -q '"pass":"bwd' "$work/m.jsonl" && fail "tune MODEL (inference) tuned a backward pass"
expect_error 2 "forward kernels only" tune "$cifar" --passes bwd_data --records "$work/m.jsonl"
"$convgen" compile "$cifar" --batch 2 --target host --schedules "$work/m.jsonl" -o "$work/cm" --no-cache >/dev/null \
  2>"$work/err" || fail "compile --schedules failed: $(cat "$work/err")"
grep -q "record in" "$work/cm/cifar10_full.manifest.json" || fail "compile's manifest does not name the records"

# --- --compare: schedules checked, then re-timed beside the default; no records needed -----
"$convgen" tune "$layer" --passes fwd --compare "nr=2" --compare "mr=16 nr=3" --rounds 3 --log "$work/cmp.jsonl" \
  >"$work/cmp" 2>"$work/err" || fail "tune --compare exited non-zero: $(cat "$work/err")"
[[ $(grep -c '"event":"compare"' "$work/cmp.jsonl") -eq 3 ]] || fail "--compare: want 3 compare events (default + 2)"
[[ $(grep -c '"status":"ok"' "$work/cmp.jsonl") -eq 3 ]] || fail "--compare: a correct schedule was not ok: $(cat "$work/cmp.jsonl")"
grep -q '"count":3,' "$work/cmp.jsonl" || fail "--compare: not re-timed over 3 rounds"
grep -q "^  default" "$work/cmp" || fail "--compare: no default row: $(cat "$work/cmp")"
expect_error 2 "bogus" tune "$layer" --passes fwd --compare "bogus=1"
expect_error 2 "--rounds" tune "$layer" --passes fwd --compare "nr=2" --rounds 0

# --- kill -9 mid-run, then resume: no trial measured twice --------------------------------
"$convgen" tune "$layer" --passes fwd,bwd_weights --records "$work/k9.jsonl" --trials 40 --seed 3 >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  [[ -s "$work/k9.jsonl" ]] && (( $(wc -l <"$work/k9.jsonl") >= 6 )) && break
  sleep 0.1
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
lines=$(wc -l <"$work/k9.jsonl")
(( lines >= 6 )) || fail "the tuner journaled only $lines lines before the kill"
"$convgen" tune "$layer" --passes fwd,bwd_weights --records "$work/k9.jsonl" --trials 40 --seed 3 >/dev/null 2>"$work/err" ||
  fail "resume failed: $(cat "$work/err")"
grep -q "from the journal" "$work/err" || fail "the resumed run replayed nothing: $(cat "$work/err")"
[[ $(duplicate_trials "$work/k9.jsonl") -eq 0 ]] || fail "a trial was measured twice after resuming"
[[ $(key_count "$work/k9.jsonl" schedule) -eq 2 ]] || fail "the resumed run did not finish both keys"

# --- a torn last line: consumers say so, the tuner cuts it off ------------------------------
head -c 100 "$work/r.jsonl" >>"$work/k9.jsonl"
expect_error 5 "no newline" schedule "$layer" --target host --schedules "$work/k9.jsonl"
"$convgen" tune "$layer" --passes fwd,bwd_weights --records "$work/k9.jsonl" --trials 40 --seed 3 >/dev/null 2>"$work/err" ||
  fail "tune on a torn file failed: $(cat "$work/err")"
grep -q "cut off an incomplete last line" "$work/err" || fail "the tuner did not say it repaired the file"
"$convgen" schedule "$layer" --target host --schedules "$work/k9.jsonl" >/dev/null 2>&1 || fail "still torn after tune"

# --- the lock: a second tuner is refused while the first holds the file ---------------------
# (util-linux's flock(1) takes the same flock(2) lock the tuner takes.)
flock "$work/r.jsonl" sleep 5 &
holder=$!
sleep 0.5
expect_error 11 "another convgen tune" tune "$layer" --records "$work/r.jsonl" --trials 5
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null

# --- a tuned trainer: the same bits on 1, 2 and 3 threads -----------------------------------
lenet="$root/models/lenet.onnx"
"$convgen" tune "$lenet" --train --batch 16 --records "$work/t.jsonl" --trials 4 >/dev/null 2>"$work/err" ||
  fail "tune --train failed: $(cat "$work/err")"
(( $(key_count "$work/t.jsonl" schedule) >= 6 )) || fail "tune --train tuned fewer than 6 kernels"
for t in 1 2 3; do
  "$convgen" train "$lenet" --data synthetic --synthetic-count 64 --steps 3 --batch 16 --threads "$t" \
    --schedules "$work/t.jsonl" --save "$work/t$t.onnx" --verbose >/dev/null 2>"$work/err$t" ||
    fail "train --schedules --threads $t failed: $(cat "$work/err$t")"
done
grep -q "schedule from $work/t.jsonl (tuned" "$work/err1" || fail "train --verbose does not name the tuned records"
cmp -s "$work/t1.onnx" "$work/t2.onnx" || fail "tuned training differs between 1 and 2 threads"
cmp -s "$work/t1.onnx" "$work/t3.onnx" || fail "tuned training differs between 1 and 3 threads"

# --- the training-step search: one training record, applied; resumed from its trials --------
(( $(key_count "$work/t.jsonl" training) == 1 )) || fail "tune --train wrote $(key_count "$work/t.jsonl" training) training records, not 1"
trials=$(key_count "$work/t.jsonl" training_trial)
(( trials >= 5 )) || fail "tune --train timed $trials training configurations (LeNet at batch 16 has at least 5 micro-batch sizes)"
grep -q "training step: \(chose\|kept the default\)" "$work/err" || fail "tune --train does not report the step search: $(cat "$work/err")"
grep -q "training record applied: micro-batch" "$work/err1" || fail "train --verbose does not say the training record was applied"
# The same command again: nothing re-timed.
"$convgen" tune "$lenet" --train --batch 16 --records "$work/t.jsonl" --trials 4 >/dev/null 2>"$work/err" ||
  fail "tune --train again failed: $(cat "$work/err")"
grep -q "training step: already tuned" "$work/err" || fail "tune --train again: not skipped: $(cat "$work/err")"
(( $(key_count "$work/t.jsonl" training_trial) == trials )) || fail "tune --train again timed configurations again"
# Killed before its choice was written: the next run replays every trial from the journal.
grep -v '"kind":"training"' "$work/t.jsonl" >"$work/t-cut.jsonl"
"$convgen" tune "$lenet" --train --batch 16 --records "$work/t-cut.jsonl" --trials 4 --verbose >/dev/null 2>"$work/err" ||
  fail "tune --train resumed failed: $(cat "$work/err")"
(( $(grep -c "training step: trial .*(from the journal)" "$work/err") == trials )) ||
  fail "tune --train resumed: not every trial replayed: $(grep "training step" "$work/err")"
(( $(key_count "$work/t-cut.jsonl" training) == 1 )) || fail "tune --train resumed wrote no training record"
# A record choosing another micro-batch and a whole-batch layer: the same bits on any T.
python3 - "$work/t.jsonl" "$work/forced.jsonl" <<'EOF2'
import json, sys
out = []
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["kind"] == "training":
        r["config"] = {"micro_batch": 8, "parallel_modes": {"conv1": "micro-batch", "conv2": "whole-batch"}}
    out.append(json.dumps(r, separators=(",", ":")))
open(sys.argv[2], "w").write("\n".join(out) + "\n")
EOF2
for t in 1 3; do
  "$convgen" train "$lenet" --data synthetic --synthetic-count 64 --steps 3 --batch 16 --threads "$t" \
    --schedules "$work/forced.jsonl" --save "$work/f$t.onnx" --verbose >/dev/null 2>"$work/ferr$t" ||
    fail "train with a forced training record, --threads $t, failed: $(cat "$work/ferr$t")"
done
grep -q "conv2: parallel mode whole-batch (the training record in $work/forced.jsonl)" "$work/ferr1" ||
  fail "train --verbose does not give the record as the reason for conv2's mode: $(grep conv2 "$work/ferr1")"
grep -q "batch 16, micro-batch 8" "$work/ferr1" || fail "the training record's micro-batch was not used"
cmp -s "$work/f1.onnx" "$work/f3.onnx" || fail "training with a training record differs between 1 and 3 threads"
# A record naming a node the model does not have is refused, naming the file.
sed 's#"conv2":"whole-batch"#"conv2":"whole-batch","conv9":"micro-batch"#' "$work/forced.jsonl" >"$work/badnode.jsonl"
expect_error 5 "conv9" train "$lenet" --data synthetic --synthetic-count 64 --steps 1 --batch 16 --schedules "$work/badnode.jsonl"

expect_error 2 "--no-step-search needs --train" tune "$layer" --records "$work/r.jsonl" --no-step-search

[[ $failures -eq 0 ]] && echo "cli.tune: all checks passed"
exit $((failures > 0))
