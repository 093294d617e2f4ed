#!/usr/bin/env bash
# `mpirun -np R convgen train`: the trained weights (--save, byte for byte) and every
# step's loss (--log) are the same for R = 1..4 and 1 or 2 threads per rank as for one
# process without mpirun, on models that cover what crosses ranks -- LeNet (a Gemm over
# the whole mini-batch),
# the small ResNet (BatchNormalization statistics, Dropout), down_to_1x1 (whole-batch
# weight gradients of cropped layers) -- with a partial last batch that leaves ranks
# without samples; a checkpoint written on 2 ranks resumes on 3 as if never stopped;
# ranks given other options refuse at start (exit 2, on every rank); a rank that fails
# ends the run with its code; one that hangs is named and ends the run (exit 12), one
# that compiles its kernels while the others wait does not; --profile-json says what
# crossed ranks and scripts/predict-scaling reads it. docs/distributed.md.
# Usage: test_mpi_training.sh CONVGEN ROOT [REAL_MODELS_DIR]
set -u
convgen="$1"
# shellcheck source=../cli/helpers.sh
source "$(dirname "${BASH_SOURCE[0]}")/../cli/helpers.sh"
root="$2"
real_models="${3:-}"
py=/usr/bin/python3
# Ranks beyond the 2 cores of CI machines, as root in CI containers.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --oversubscribe --bind-to none)

# 36 samples, batch 16, micro-batch 4: two full batches (4 micro-batches) and one of 4
# samples (1 micro-batch: ranks 1 and 2 of 3 hold none).
common=(--data synthetic --synthetic-count 36 --batch 16 --micro-batch 4 --threads 1 --lr 0.01 --seed 3)

# run_single NAME MODEL ARGS...: one process, no mpirun; writes $work/NAME.{onnx,log}.
run_single() {
  local name="$1" model="$2"; shift 2
  "$convgen" train "$model" "${common[@]}" --save "$work/$name.onnx" --log "$work/$name.log" "$@" \
    >"$work/$name.out" 2>"$work/$name.err" || fail "$name: convgen train exited $? ($(tail -n 3 "$work/$name.err"))"
}

# run_ranks NAME R MODEL ARGS...: mpirun -np R; writes $work/NAME.{onnx,log}.
run_ranks() {
  local name="$1" ranks="$2" model="$3"; shift 3
  "${mpi[@]}" -np "$ranks" "$convgen" train "$model" "${common[@]}" --save "$work/$name.onnx" --log "$work/$name.log" "$@" \
    >"$work/$name.out" 2>"$work/$name.err" || fail "$name: mpirun -np $ranks convgen train exited $? ($(tail -n 5 "$work/$name.err"))"
}

# same A B: the saved models and the logs' losses agree bit for bit.
same() {
  cmp -s "$work/$1.onnx" "$work/$2.onnx" || fail "$2: the trained weights differ from $1's"
  diff <(grep -o '"loss":[^,]*' "$work/$1.log") <(grep -o '"loss":[^,]*' "$work/$2.log") >/dev/null ||
    fail "$2: the losses differ from $1's"
}

for model in lenet small_resnet down_to_1x1; do
  run_single "$model.single" "$root/models/$model.onnx" --epochs 2
  for ranks in 1 2 3; do
    run_ranks "$model.np$ranks" "$ranks" "$root/models/$model.onnx" --epochs 2
    same "$model.single" "$model.np$ranks"
  done
  # Rank 0 alone prints: one result line however many ranks.
  [[ $(grep -c '^steps ' "$work/$model.np3.out") -eq 1 ]] || fail "$model.np3: want one 'steps' line: $(cat "$work/$model.np3.out")"
done
# Four ranks (the partial batch leaves three without samples); and 7 micro-batches over 3
# ranks, split 2, 2, 3 to form three tree nodes where rank_range's 3, 2, 2 forms six
# (tree_aligned_cuts): the same weights as one process either way.
run_ranks lenet.np4 4 "$root/models/lenet.onnx" --epochs 2
same lenet.single lenet.np4
run_single lenet.b28 "$root/models/lenet.onnx" --steps 3 --batch 28
run_ranks lenet.b28.np3 3 "$root/models/lenet.onnx" --steps 3 --batch 28 --verbose
same lenet.b28 lenet.b28.np3
grep -q "micro-batches (2,2,3 of 7); finishing the gradient tree moves 1.00x the bytes of a ring all-reduce" \
  "$work/lenet.b28.np3.err" || fail "lenet.b28.np3: the split of 7 micro-batches over 3 ranks is not 2,2,3: $(grep 'over 3' "$work/lenet.b28.np3.err")"

# --profile-json on 2 ranks: every layer with parameters, how its gradient crosses
# ranks (LeNet's ip1 is a Gemm over the mini-batch: its activations travel), the step
# split into compute and exposed communication, the gradient exchange's bytes.
run_ranks lenet.prof 2 "$root/models/lenet.onnx" --steps 3 --synthetic-count 48 --profile-json "$work/prof.json"
grep -q "exposed communication" "$work/lenet.prof.err" || fail "lenet.prof: --profile shows no exposed communication"
"$py" - "$work/prof.json" <<'PY' || fail "lenet.prof: --profile-json is not what scripts/predict-scaling reads"
import json, sys
p = json.load(open(sys.argv[1]))
assert p["format"] == "convgen-train-profile/1" and p["ranks"] == 2 and p["steps"] == 3, p
layers = {l["node"]: l for l in p["layers"]}
kinds = {l["exchange"] for l in p["layers"]}
assert kinds == {"tree", "activations"}, kinds
assert all(l["gradient_floats"] > 0 for l in p["layers"])
assert all(l["shared_floats_per_sample"] > 0 for l in p["layers"] if l["exchange"] == "activations")
assert p["gradient_exchange_bytes_per_step"] > 0 and p["ring_bytes_per_step"] > 0
assert abs(p["gradient_exchange_bytes_per_step"] / p["ring_bytes_per_step"] - 1.0) < 0.01  # 4 micro-batches: one node per rank
assert 0 < p["step_ms"]["communication"] < p["step_ms"]["step"]
assert p["step_ms"]["updates"] > 0  # thread time every rank repeats (predict-scaling's input)
PY
# In a network with BatchNormalization the backward completes gradients phase by phase:
# they leave in several buckets during the backward (overlap), the weights unchanged.
run_ranks small_resnet.prof 2 "$root/models/small_resnet.onnx" --epochs 2 --profile-json "$work/prof_bn.json"
same small_resnet.single small_resnet.prof
"$py" - "$work/prof_bn.json" <<'PY' || fail "small_resnet.prof: its gradients do not leave in buckets during the backward"
import json, sys
p = json.load(open(sys.argv[1]))
early = {l["bucket"] for l in p["layers"] if l["exchange"] == "tree" and l["bucket"] >= 0}
assert len(early) >= 2, p["layers"]
# Buckets in flight together count once: communication is wall time within the step.
assert 0 < p["step_ms"]["communication"] <= p["step_ms"]["step"], p["step_ms"]
PY
# ... and scripts/predict-scaling reads it: a row per R (4 micro-batches on 4 ranks: one
# each), and a validation table.
"$root/scripts/predict-scaling" "$work/prof.json" --alpha-us 1 --bandwidth-GBps 5 --ranks 2,4 --global-batch 16 \
  --validate "$work/prof.json" >"$work/predict.out" 2>&1 || fail "predict-scaling failed: $(tail -n 3 "$work/predict.out")"
grep -Eq '^ +4 +16 +1/1/1/1 ' "$work/predict.out" || fail "predict-scaling: no row for 4 ranks: $(cat "$work/predict.out")"

# Thread counts and ranks together: 2 ranks of 2 threads.
run_ranks small_resnet.np2t2 2 "$root/models/small_resnet.onnx" --epochs 2 --threads 2
same small_resnet.single small_resnet.np2t2
run_ranks small_resnet.np3t2 3 "$root/models/small_resnet.onnx" --epochs 2 --threads 2
same small_resnet.single small_resnet.np3t2
run_ranks small_resnet.np4 4 "$root/models/small_resnet.onnx" --epochs 2
same small_resnet.single small_resnet.np4

# Layers batched at barriers (forward and backward-data over the mini-batch: ResNet-18's
# layer4 on 1x1 images), when the torchvision exports are there.
if [[ -n "$real_models" && -f "$real_models/resnet18.onnx" ]]; then
  run_single resnet18.single "$real_models/resnet18.onnx" --steps 3 --verbose
  grep -q 'over the whole mini-batch at barriers' "$work/resnet18.single.err" || fail "resnet18: no layer ran batched; the test misses what it is for"
  # An epoch of 36 samples: two batches of 16 and a partial one of 4 (one micro-batch).
  for rt in "2 2" "3 1" "4 1"; do
    read -r r t <<<"$rt"
    run_ranks "resnet18.np${r}t$t" "$r" "$real_models/resnet18.onnx" --steps 3 --threads "$t"
    same resnet18.single "resnet18.np${r}t$t"
  done
fi

# A checkpoint written on 2 ranks, resumed on 3: the same as 5 steps never stopped.
run_single resume.single "$root/models/small_resnet.onnx" --steps 5
run_ranks resume.first 2 "$root/models/small_resnet.onnx" --steps 2 --checkpoint "$work/ck"
[[ -f "$work/ck/checkpoint.cgck" ]] || fail "resume.first: no checkpoint written"
run_ranks resume.second 3 "$root/models/small_resnet.onnx" --steps 5 --resume "$work/ck"
cmp -s "$work/resume.single.onnx" "$work/resume.second.onnx" || fail "resumed on 3 ranks: the weights differ from one run"

# SIGINT on mpirun (forwarded to the ranks as SIGTERM): every rank stops after the same
# step, rank 0 checkpoints it, and resuming from it on 3 ranks gives one run's weights.
sig=(--data synthetic --synthetic-count 2000 --batch 16 --micro-batch 4 --threads 1 --lr 0.01 --seed 3)
"${mpi[@]}" -np 2 "$convgen" train "$root/models/lenet.onnx" "${sig[@]}" --epochs 1000 --log "$work/sig.log" \
  --checkpoint "$work/sig" >"$work/sig.out" 2>"$work/sig.err" &
launcher=$!
for _ in $(seq 300); do [[ -f "$work/sig.log" && $(wc -l <"$work/sig.log") -ge 5 ]] && break; sleep 0.1; done
kill -INT "$launcher"
wait "$launcher"
code=$?
[[ $code -ne 0 ]] || fail "SIGINT on mpirun: exit 0 after an interrupted run"
if [[ -f "$work/sig/checkpoint.cgck" ]]; then
  stopped=$("$py" -c 'import json, struct, sys
b = open(sys.argv[1], "rb").read(); h = struct.unpack("<Q", b[16:24])[0]
print(json.loads(b[24:24 + h])["step"])' "$work/sig/checkpoint.cgck")
  [[ "$stopped" -eq $(wc -l <"$work/sig.log") ]] ||
    fail "SIGINT on mpirun: checkpoint at step $stopped, but $(wc -l <"$work/sig.log") steps were logged"
  target=$((stopped + 3))
  "${mpi[@]}" -np 3 "$convgen" train "$root/models/lenet.onnx" "${sig[@]}" --steps "$target" --epochs 1000 \
    --resume "$work/sig" --save "$work/sig.resumed.onnx" >"$work/out" 2>"$work/err" ||
    fail "resuming the interrupted run on 3 ranks exited $?: $(tail -n 3 "$work/err")"
  "$convgen" train "$root/models/lenet.onnx" "${sig[@]}" --steps "$target" --epochs 1000 --save "$work/sig.single.onnx" \
    >"$work/out" 2>"$work/err" || fail "the uninterrupted run exited $?"
  cmp -s "$work/sig.resumed.onnx" "$work/sig.single.onnx" || fail "interrupted on 2 ranks, resumed on 3: weights differ"
else
  fail "SIGINT on mpirun: no checkpoint written: $(tail -n 3 "$work/sig.err")"
fi

# Ranks given other options: every rank refuses at start, exit 2.
OMPI_MCA_orte_abort_print_stack=0 "${mpi[@]}" -np 1 "$convgen" train "$root/models/lenet.onnx" "${common[@]}" --steps 1 : \
  -np 1 "$convgen" train "$root/models/lenet.onnx" "${common[@]}" --steps 1 --lr 0.1 >"$work/out" 2>"$work/err"
code=$?
[[ $code -eq 2 ]] || fail "ranks with other --lr: mpirun exited $code, want 2"
grep -q "rank 1 was given another model, options, data or kernel target than rank 0" "$work/err" ||
  fail "ranks with other --lr: no message naming rank 1: $(cat "$work/err")"

# A bad path on rank 0 (an unreadable --resume): every rank ends, with its code (8).
"${mpi[@]}" -np 2 "$convgen" train "$root/models/lenet.onnx" "${common[@]}" --steps 1 --resume "$work/none" \
  >"$work/out" 2>"$work/err"
code=$?
[[ $code -eq 8 || $code -eq 4 ]] || fail "missing checkpoint on 2 ranks: mpirun exited $code, want 8 or 4: $(cat "$work/err")"
grep -q "convgen: rank 0: .*checkpoint.cgck" "$work/err" || fail "missing checkpoint on 2 ranks: no message from rank 0: $(cat "$work/err")"

# A rank that hangs (stopped with SIGSTOP after a few steps): the others name it and
# every rank ends with exit code 12 within --rank-timeout plus start-up slack.
"${mpi[@]}" -np 3 "$convgen" train "$root/models/lenet.onnx" "${sig[@]}" --epochs 1000 --log "$work/hang.log" \
  --rank-timeout 2 >"$work/hang.out" 2>"$work/hang.err" &
launcher=$!
for _ in $(seq 300); do [[ -f "$work/hang.log" && $(wc -l <"$work/hang.log") -ge 3 ]] && break; sleep 0.1; done
stopped=""
for pid in $(pgrep -P "$launcher"); do
  tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=2' && stopped=$pid
done
if [[ -z "$stopped" ]]; then
  fail "hang: rank 2's process not found among mpirun's children"
  kill -TERM "$launcher"
else
  kill -STOP "$stopped"
  for _ in $(seq 300); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$launcher" 2>/dev/null; then
    fail "hang: mpirun still running 30 s after rank 2 stopped"
    kill -KILL "$launcher"
  fi
  kill -KILL "$stopped" 2>/dev/null
fi
wait "$launcher"
code=$?
[[ $code -eq 12 ]] || fail "hang: mpirun exited $code, want 12: $(tail -n 5 "$work/hang.err")"
grep -Eq "rank [01]: rank 2 (did not reach exchange|went silent)" "$work/hang.err" || fail "hang: no rank named rank 2: $(tail -n 5 "$work/hang.err")"

# Building kernels is not hanging: one rank without the kernel cache compiles every
# kernel while the others, their cache warm, wait for it with a 1-second timeout.
"$convgen" train "$root/models/lenet.onnx" "${common[@]}" --steps 3 --save "$work/cold.single.onnx" \
  --cache-dir "$work/warm" >"$work/out" 2>"$work/err" || fail "warming the cache exited $?"
"${mpi[@]}" -np 2 "$convgen" train "$root/models/lenet.onnx" "${common[@]}" --steps 3 --cache-dir "$work/warm" \
  --rank-timeout 1 --save "$work/cold.np3.onnx" : -np 1 "$convgen" train "$root/models/lenet.onnx" "${common[@]}" \
  --steps 3 --no-cache --rank-timeout 1 >"$work/cold.out" 2>"$work/cold.err" ||
  fail "a rank compiling its kernels: mpirun exited $?: $(tail -n 3 "$work/cold.err")"
cmp -s "$work/cold.single.onnx" "$work/cold.np3.onnx" || fail "a rank compiling its kernels: weights differ from one process"

[[ $failures -eq 0 ]] || exit 1
echo "mpi training: all checks passed"
