#!/usr/bin/env bash
# The generated drivers of the bundled models and driver_ops (built into one program, so four compiled
# models link and run together) must give the same bits as the in-process executor
# (`convgen run`), split into calls of one sample where the model allows -- segmenter_tiny runs ConvTranspose, bilinear Resize and folded channel
# shuffles; driver_ops a channel Gather, Max, Min, Mean, Convs with fused Clip, SiLU, HardSwish and
# LeakyRelu epilogues, residual Adds fused into Convs, a Concat its Convs write in place and
# SoftmaxCrossEntropyLoss -- and refuse
# a weights file of another model with a clear message.
set -u
convgen="$1"
check="$2"
built="$3"   # directory holding <model>/<model>.weights from the build-time compile
root="$4"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
for model in lenet cifar10_full segmenter_tiny driver_ops; do
  case_dir="$work/$model"
  mkdir -p "$case_dir/test_data_set_0"
  source_model="$root/models/$model.onnx"
  [[ $model == driver_ops ]] && source_model="$built/driver_ops.onnx"
  cp "$source_model" "$case_dir/model.onnx"
  "$check" input "$model" "$case_dir/test_data_set_0/input_0.pb" || { fail "$model: input"; continue; }
  "$check" run "$model" "$built/$model/$model.weights" "$case_dir/test_data_set_0/input_0.pb" \
    "$case_dir/test_data_set_0/output_0.pb" || { fail "$model: driver run"; continue; }
  # Bit for bit: the executor's output must equal the driver's exactly.
  "$convgen" check "$case_dir" --rtol 0 --atol 0 >"$work/out" 2>&1 || fail "$model: driver and executor differ: $(cat "$work/out")"
done
# At batch 2 lenet runs as two calls of one sample, each thread on its own arena (batch-level
# parallel inference); driver_ops, whose loss binds labels for the whole batch, runs whole.
grep -q 'arenas_->run(2, ' "$built/lenet/lenet.cpp" || fail "lenet: the batch is not split into calls"
grep -q 'arenas_' "$built/driver_ops/driver_ops.cpp" && fail "driver_ops: split though its loss mixes samples"
# driver_ops' residual blocks run as two +residual kernels, one with the Relu after the sum.
[[ $(grep -c '+residual' "$built/driver_ops/driver_ops.cpp") -ge 2 ]] || fail "driver_ops: residual Adds not fused"
grep -q '+residual+relu' "$built/driver_ops/driver_ops.cpp" || fail "driver_ops: Relu after the residual sum not fused"
# Its Concat is written in place by two +outstride(8) kernels, and copies nothing.
[[ $(grep -c '+outstride(8)' "$built/driver_ops/driver_ops.cpp") -ge 2 ]] || fail "driver_ops: Concat not written in place"
grep -q 'ops::concat' "$built/driver_ops/driver_ops.cpp" && fail "driver_ops: the Concat still copies"
"$check" run lenet "$built/cifar10_full/cifar10_full.weights" "$work/lenet/test_data_set_0/input_0.pb" "$work/x.pb" \
  2>"$work/err" && fail "lenet accepted cifar10_full's weights"
grep -q "written for another model" "$work/err" || fail "weights mismatch message: $(cat "$work/err")"
# A truncated weights file and one that is not a weights file at all.
head -c 1000 "$built/lenet/lenet.weights" >"$work/cut.weights"
"$check" run lenet "$work/cut.weights" "$work/lenet/test_data_set_0/input_0.pb" "$work/x.pb" 2>"$work/err" &&
  fail "lenet accepted truncated weights"
grep -q "cut.weights: truncated weights file" "$work/err" || fail "truncated weights message: $(cat "$work/err")"
echo "not weights" >"$work/junk.weights"
"$check" run lenet "$work/junk.weights" "$work/lenet/test_data_set_0/input_0.pb" "$work/x.pb" 2>"$work/err" &&
  fail "lenet accepted a non-weights file"
grep -q "junk.weights: not a convgen weights file" "$work/err" || fail "junk weights message: $(cat "$work/err")"
if [[ $failures -eq 0 ]]; then echo "models.driver: drivers and executor agree bit for bit"; else exit 1; fi
