#!/usr/bin/env bash
# Resume after SIGKILL equals the uninterrupted run bit for bit (docs/training.md): a run
# checkpointing every 2 steps is killed at a random moment, resumed from its checkpoint
# (again and again if need be) until it finishes; its saved model must be byte-identical
# to an uninterrupted run's. Also: a checkpoint is refused for other options (exit 8).
set -u
convgen="$1"
root="$2"
# shellcheck source=../cli/helpers.sh
source "$root/tests/cli/helpers.sh"

run_case() {
  local model="$1" steps="$2"; shift 2
  local args=(train "$root/models/$model.onnx" --data synthetic --synthetic-count 300 --batch 32 --steps "$steps"
              --threads 2 --seed 5 "$@")
  "$convgen" "${args[@]}" --save "$work/$model.full.onnx" >/dev/null 2>&1 || fail "$model: uninterrupted run"
  # A second uninterrupted run, its kernels now in the kernel cache as the killed runs'
  # will be: its duration sets when to kill, at a random 5-45% of it.
  local started=$EPOCHREALTIME
  "$convgen" "${args[@]}" --save "$work/$model.full2.onnx" >/dev/null 2>&1 || fail "$model: second uninterrupted run"
  local took
  took="$(awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }')"
  local ck="$work/$model.ck" kills=0 status=1 attempt
  for attempt in 1 2 3 4 5 6 7 8; do
    local resume=()
    [[ -f "$ck/checkpoint.cgck" ]] && resume=(--resume "$ck")
    "$convgen" "${args[@]}" "${resume[@]}" --checkpoint "$ck" --every 2 --save "$work/$model.resumed.onnx" \
      >/dev/null 2>"$work/$model.err" &
    local pid=$!
    if (( attempt <= 3 )); then
      # Kill at a random moment of the run.
      sleep "$(awk -v r=$RANDOM -v t="$took" 'BEGIN { printf "%.3f", t * (0.05 + (r % 100) / 250.0) }')"
      if kill -9 "$pid" 2>/dev/null; then kills=$((kills + 1)); fi
    fi
    wait "$pid" 2>/dev/null
    status=$?
    (( status == 0 )) && break
    ls "$ck" >/dev/null 2>&1 || true
  done
  (( status == 0 )) || fail "$model: the resumed run did not finish: $(cat "$work/$model.err")"
  (( kills > 0 )) || fail "$model: no run was killed (the test needs a slower case)"
  cmp -s "$work/$model.full.onnx" "$work/$model.resumed.onnx" ||
    fail "$model: killed $kills times and resumed, the trained model differs from the uninterrupted run's"
  echo "$model: killed $kills times, resumed to the same bits"
}

run_case lenet 60
run_case small_resnet 24

# A checkpoint belongs to its options: another learning rate is refused, naming the file.
expect_error 8 "other options" train "$root/models/lenet.onnx" --data synthetic --synthetic-count 300 --batch 32 \
  --steps 70 --threads 2 --seed 5 --lr 0.02 --resume "$work/lenet.ck"
# ... and to its layers' parallel modes (they shape the summation order).
expect_error 8 "execution=" train "$root/models/lenet.onnx" --data synthetic --synthetic-count 300 --batch 32 \
  --steps 70 --threads 2 --seed 5 --parallel-mode conv1=whole-batch --resume "$work/lenet.ck"
# ... and to its model file.
expect_error 8 "another model" train "$root/models/cifar10_full.onnx" --data synthetic --synthetic-count 300 \
  --batch 32 --steps 70 --threads 2 --seed 5 --resume "$work/lenet.ck"
# A corrupted checkpoint is a clear error too.
printf 'garbage' >"$work/lenet.ck/checkpoint.cgck"
expect_error 8 "checkpoint.cgck" train "$root/models/lenet.onnx" --data synthetic --synthetic-count 300 --batch 32 \
  --steps 70 --threads 2 --seed 5 --resume "$work/lenet.ck"

if (( failures > 0 )); then
  echo "$failures failed"
  exit 1
fi
echo "resume after SIGKILL: all checks passed"
