#!/usr/bin/env bash
# End-to-end checks of `convgen train`: --help, the stable exit codes and one-line messages
# of bad command lines, models and data (docs/exit-codes.md), a tiny run's outputs (--log,
# --dump-order, --save), bit-identical results for every --threads value, the shuffle
# order, SIGINT (130 after the running step) and an unwritable --save (4, no file left).
# Runs are kept tiny (a few steps, small synthetic sets). Every run that gets past the
# model import JIT-compiles the model's kernels (~1.7 s for LeNet, ~3 s for cifar10_full),
# so checks that need no real model use tiny.onnx (one Conv and a Gemm, ~0.5 s).
# Usage: test_train.sh CONVGEN ROOT
set -u
convgen="$1"
# shellcheck source=helpers.sh
source "$(dirname "${BASH_SOURCE[0]}")/helpers.sh"
root="$2"
lenet="$root/models/lenet.onnx"
cifar="$root/models/cifar10_full.onnx"
py=/usr/bin/python3 # Debian's python3 has python3-onnx; the python3 on PATH may not
tiny=(--data synthetic --synthetic-count 200 --steps 3 --batch 16)

# expect_late_error CODE FRAGMENT ARGS...: like expect_error, for faults found after
# training has started, when stderr also holds the "training ..." header: the exit code,
# exactly one "convgen:" error line, and it is the last line and contains FRAGMENT.
expect_late_error() {
  local code="$1" fragment="$2"; shift 2
  "$convgen" "$@" >"$work/out" 2>"$work/err"
  local got=$?
  [[ $got -eq $code ]] || fail "convgen $* exited $got, want $code"
  [[ $(grep -c '^convgen: ' "$work/err") -eq 1 ]] || fail "convgen $*: want one error line, got: $(cat "$work/err")"
  tail -n 1 "$work/err" | grep -q -- "$fragment" || fail "convgen $*: last stderr line lacks '$fragment': $(cat "$work/err")"
}

# loss_values LOG: the "loss" field of every line of a --log file, one a line.
loss_values() {
  "$py" -c 'import json, sys
for line in open(sys.argv[1]):
    print(repr(json.loads(line)["loss"]))' "$1"
}

# --- help -------------------------------------------------------------------------------
"$convgen" train --help >"$work/help" 2>"$work/err" || fail "train --help exited non-zero"
grep -q "usage: convgen train" "$work/help" || fail "train --help: no usage line"
# shellcheck disable=SC2054 # --normalize=0,1 is one OPTION=VALUE element
value_options=(--data=synthetic --batch=8 --micro-batch=8 --epochs=1 --steps=1 --lr=0.1
  --momentum=0.9 --weight-decay=0 --lr-schedule=constant --threads=1 --conv-impl=generated --seed=1
  --normalize=0,1 --synthetic-count=10 --ignore-index=255 --log=x --dump-order=x --save=x --checkpoint=x --every=1
  --resume=x --schedules=x --target=x --cache-dir=x --parallel-mode=conv1=whole-batch --rank-timeout=5 --profile-json=x)
flag_options=(--intra-kernel --profile --no-shuffle --verbose --no-cache)
documented=()
for o in "${value_options[@]}" "${flag_options[@]}"; do documented+=("${o%%=*}"); done
for o in "${documented[@]}"; do
  grep -q -- "$o\b" "$work/help" || fail "train --help does not mention $o"
done
# ... and documents no option this list lacks (so a new option gets a check here too).
for o in $(grep -o -- '--[a-z][a-z-]*' "$work/help" | sort -u); do
  [[ " ${documented[*]} --help " == *" $o "* ]] || fail "train --help documents $o, unknown to this test"
done
# Every documented option is accepted by the parser: with no MODEL the complaint is
# the missing MODEL, not an unknown option.
for o in "${value_options[@]}"; do
  expect_error 2 "missing MODEL" train "${o%%=*}" "${o#*=}"
done
for o in "${flag_options[@]}"; do expect_error 2 "missing MODEL" train "$o"; done
"$convgen" --help | grep -q "^  train " || fail "convgen --help does not list train"

# --- bad command lines (2) --------------------------------------------------------------
expect_error 2 "missing MODEL" train
expect_error 2 "missing --data" train "$lenet"
expect_error 2 "unknown option '--bogus'" train "$lenet" --data synthetic --bogus
expect_error 2 "--lr: 'x' is not a number" train "$lenet" --data synthetic --lr x
expect_error 2 "--rank-timeout: '-1' is negative" train "$lenet" --data synthetic --rank-timeout -1
expect_error 2 "--batch 0" train "$lenet" --data synthetic --batch 0
expect_error 2 "--steps -3" train "$lenet" --data synthetic --steps -3
expect_error 2 "unknown data source 'nope'" train "$lenet" --data nope
expect_error 2 "--lr-schedule: 'step:x'" train "$lenet" --data synthetic --lr-schedule step:x
expect_error 2 "--lr-schedule: 'linear'" train "$lenet" --data synthetic --lr-schedule linear
expect_error 2 "--ignore-index: '256' is not a label byte in" train "$lenet" --data synthetic --ignore-index 256
expect_error 2 "--data fashion-mnist holds one label per image; a segmentation model" \
  train "$root/models/unet_tiny.onnx" --data fashion-mnist
expect_error 2 "--parallel-mode: 'conv1' is not NODE=micro-batch" train "$lenet" --data synthetic --parallel-mode conv1
expect_error 2 "--parallel-mode: 'conv1=fast' is not" train "$lenet" --data synthetic --parallel-mode conv1=fast
expect_error 2 "--parallel-mode: 'relu1' is not a Conv or ConvTranspose node" train "$lenet" --data synthetic --parallel-mode relu1=micro-batch
expect_error 2 "--micro-batch 16 is larger than --batch 8" train "$lenet" --data synthetic --batch 8 --micro-batch 16

# --- bad models (4, 7) ------------------------------------------------------------------
expect_error 4 "missing.onnx: cannot read" train "$work/missing.onnx" --data synthetic
# Two models with a dynamic batch dim "N" on a 1x28x28 input, 10 classes:
#   tiny.onnx:        Conv(2 channels, 4x4 stride 4) -> Flatten -> Gemm, fast to compile;
#   no_backward.onnx: Conv -> GlobalMaxPool -> Flatten -> Gemm; GlobalMaxPool has no backward.
"$py" - "$work" <<'EOF' || fail "could not build the test models with $py and onnx"
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

def save(path, name, nodes, inits):
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 28, 28])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, path)

rng = np.random.RandomState(0)
def tensor(name, *shape, scale=1.0):
    return numpy_helper.from_array((rng.randn(*shape) * scale).astype(np.float32), name)

save(f"{sys.argv[1]}/tiny.onnx", "tiny",
     [helper.make_node("Conv", ["x", "W"], ["c"], name="conv", strides=[4, 4]),
      helper.make_node("Flatten", ["c"], ["f"], name="flat"),
      helper.make_node("Gemm", ["f", "B"], ["y"], name="fc", transB=1)],
     [tensor("W", 2, 1, 4, 4, scale=0.3), tensor("B", 10, 2 * 7 * 7, scale=0.1)])
save(f"{sys.argv[1]}/no_backward.onnx", "no_backward",
     [helper.make_node("Conv", ["x", "W"], ["c"], name="conv1"),
      helper.make_node("GlobalMaxPool", ["c"], ["t"], name="max_hw"),
      helper.make_node("Flatten", ["t"], ["f"], name="flat"),
      helper.make_node("Gemm", ["f", "B"], ["y"], name="fc", transB=1)],
     [tensor("W", 4, 1, 3, 3), tensor("B", 10, 4, scale=0.01)])
# folded_weight.onnx: tiny.onnx with the conv weights from a Constant node (trainable,
# but not an initializer --save could rewrite).
save(f"{sys.argv[1]}/folded_weight.onnx", "folded_weight",
     [helper.make_node("Constant", [], ["W"], name="weights", value=tensor("Wc", 2, 1, 4, 4, scale=0.3)),
      helper.make_node("Conv", ["x", "W"], ["c"], name="conv", strides=[4, 4]),
      helper.make_node("Flatten", ["c"], ["f"], name="flat"),
      helper.make_node("Gemm", ["f", "B"], ["y"], name="fc", transB=1)],
     [tensor("B", 10, 2 * 7 * 7, scale=0.1)])
EOF
tinym="$work/tiny.onnx"
"$convgen" inspect "$work/no_backward.onnx" --batch 2 >/dev/null || fail "inspect no_backward.onnx (the model itself is fine)"
expect_error 7 "node 'max_hw' (GlobalMaxPool)" train "$work/no_backward.onnx" --data synthetic --steps 1 --batch 4

# --- bad data (8) -----------------------------------------------------------------------
"$py" - "$work" <<'EOF' || fail "could not write the IDX files"
import struct, sys
d, n = sys.argv[1], 4
open(f"{d}/images.idx", "wb").write(struct.pack(">IIII", 0x803, n, 28, 28) + bytes(n * 28 * 28))
open(f"{d}/labels.idx", "wb").write(struct.pack(">II", 0x801, n) + bytes([0, 1, 9, 2]))
open(f"{d}/labels_10.idx", "wb").write(struct.pack(">II", 0x801, n) + bytes([0, 1, 10, 2]))
open(f"{d}/labels_magic.idx", "wb").write(struct.pack(">II", 0x802, n) + bytes([0, 1, 9, 2]))
open(f"{d}/garbage.idx", "wb").write(b"not an IDX file")
EOF
idx_ok=(train "$tinym" --steps 1 --batch 4)
"$convgen" "${idx_ok[@]}" --data "idx:$work/images.idx,$work/labels.idx" >/dev/null 2>"$work/err" ||
  fail "a good IDX pair: $(cat "$work/err")"
expect_error 8 "missing-images.idx" "${idx_ok[@]}" --data "idx:$work/missing-images.idx,$work/labels.idx"
expect_error 8 "missing-labels.idx" "${idx_ok[@]}" --data "idx:$work/images.idx,$work/missing-labels.idx"
expect_error 8 "garbage.idx: not an IDX" "${idx_ok[@]}" --data "idx:$work/garbage.idx,$work/labels.idx"
expect_error 8 "labels_magic.idx: not an IDX" "${idx_ok[@]}" --data "idx:$work/images.idx,$work/labels_magic.idx"
expect_error 8 "label 10 of sample 2" "${idx_ok[@]}" --data "idx:$work/images.idx,$work/labels_10.idx"
expect_error 8 "1x28x28 but the model's input is 3x32x32" train "$cifar" --data fashion-mnist --steps 1
expect_error 2 "--normalize '1,2,3'" train "$tinym" --data synthetic --steps 1 --normalize 1,2,3
# A diverging run stops with 10 and names the step. (tiny.onnx has no Relu or MaxPool:
# convgen's turn NaN into numbers, see the report of this test's author.)
expect_late_error 10 "the loss is" train "$tinym" --data synthetic --synthetic-count 50 --batch 10 --steps 5 --lr 1e30
# LeNet's ReLU and max-pooling keep the NaN out of the loss: the weights check stops it.
expect_late_error 10 "holds NaN or infinite values after the update" train "$lenet" --data synthetic \
  --synthetic-count 64 --batch 16 --steps 5 --lr 1e30
# --conv-impl takes two values.
expect_error 2 "--conv-impl 'fast': expected generated or im2col-blis" train "$tinym" --data synthetic --conv-impl fast
# --save must be able to write every trained tensor back, checked before any step.
expect_late_error 7 "'W' is not a float32 initializer" train "$work/folded_weight.onnx" --data synthetic \
  --synthetic-count 50 --batch 10 --steps 2 --save "$work/folded_saved.onnx"
[[ -e "$work/folded_saved.onnx" ]] && fail "--save refused, yet a file was written"
"$convgen" train "$work/folded_weight.onnx" --data synthetic --synthetic-count 50 --batch 10 --steps 2 >/dev/null 2>&1 ||
  fail "folded_weight.onnx trains without --save"

# --- a tiny run: log, order, saved model, test accuracy ---------------------------------
run() { # run NAME ARGS...: a tiny lenet run writing $work/NAME.{jsonl,order,onnx,out}
  local name="$1"; shift
  "$convgen" train "$lenet" "${tiny[@]}" --log "$work/$name.jsonl" --dump-order "$work/$name.order" \
    --save "$work/$name.onnx" "$@" >"$work/$name.out" 2>"$work/$name.err" || fail "train $name $*: $(cat "$work/$name.err")"
}
run base --threads 2
[[ $(wc -l <"$work/base.jsonl") -eq 3 ]] || fail "--log: want 3 lines: $(cat "$work/base.jsonl")"
"$py" - "$work/base.jsonl" <<'EOF' || fail "--log lines are not the documented JSON"
import json, sys
for n, line in enumerate(open(sys.argv[1])):
    record = json.loads(line)
    assert set(record) == {"step", "epoch", "loss", "lr", "images_per_s"}, record
    assert record["step"] == n and record["epoch"] == 0, record
    assert all(isinstance(record[k], (int, float)) for k in record), record
EOF
"$py" - "$work/base.order" 200 <<'EOF' || fail "--dump-order is not '# epoch 0' and a permutation of 0..199"
import sys
lines = open(sys.argv[1]).read().splitlines()
assert lines[0] == "# epoch 0", lines[0]
assert sorted(int(v) for v in lines[1:]) == list(range(int(sys.argv[2]))), "not a permutation"
assert [int(v) for v in lines[1:]] != list(range(int(sys.argv[2]))), "shuffled order is the identity"
EOF
[[ -s "$work/base.onnx" ]] || fail "--save wrote nothing"
"$convgen" inspect "$work/base.onnx" --batch 2 >/dev/null 2>"$work/err" ||
  fail "inspect of the saved model: $(cat "$work/err")"
cmp -s "$work/base.onnx" "$lenet" && fail "the saved model equals the original"
grep -q "^test_accuracy " "$work/base.out" || fail "no test_accuracy line: $(cat "$work/base.out")"
grep -q "^saved $work/base.onnx" "$work/base.out" || fail "no 'saved' line: $(cat "$work/base.out")"

# --- the same bits for every --threads value (and --intra-kernel) ------------------------
run t1 --threads 1
run intra --threads 2 --intra-kernel
for other in t1 intra; do
  cmp -s "$work/base.onnx" "$work/$other.onnx" || fail "--save differs between --threads 2 and $other"
  [[ "$(loss_values "$work/base.jsonl")" == "$(loss_values "$work/$other.jsonl")" ]] ||
    fail "losses differ between --threads 2 and $other"
done
# cifar10_full (LRN spelt as AveragePool/Mul/Add/Pow, average pooling), 4 micro-batches.
for t in 1 2; do
  "$convgen" train "$cifar" --data synthetic --synthetic-count 64 --steps 2 --batch 16 --micro-batch 4 \
    --threads "$t" --log "$work/cifar$t.jsonl" --save "$work/cifar$t.onnx" >/dev/null 2>"$work/err" ||
    fail "cifar10_full --threads $t: $(cat "$work/err")"
done
cmp -s "$work/cifar1.onnx" "$work/cifar2.onnx" || fail "cifar10_full: --save differs between --threads 1 and 2"
[[ "$(loss_values "$work/cifar1.jsonl")" == "$(loss_values "$work/cifar2.jsonl")" ]] ||
  fail "cifar10_full: losses differ between --threads 1 and 2"

# --- shuffle order ----------------------------------------------------------------------
order() { # order NAME ARGS...: the sample order of a tiny.onnx run on 50 samples
  "$convgen" train "$tinym" --data synthetic --synthetic-count 50 --batch 10 \
    --dump-order "$work/$1.order" "${@:2}" >/dev/null 2>"$work/err" || fail "order $*: $(cat "$work/err")"
}
order plain --no-shuffle --steps 1
[[ "$(cat "$work/plain.order")" == "$(printf '# epoch 0\n'; seq 0 49)" ]] || fail "--no-shuffle order is not 0..49"
order seed1 --seed 1 --steps 1
order seed2 --seed 2 --epochs 3
# --epochs 3: one "# epoch E" block each, each a permutation, each shuffled anew; the
# first differs from --seed 1's.
"$py" - "$work/seed1.order" "$work/seed2.order" <<'EOF' || fail "--seed 1 / --seed 2 --epochs 3 orders are wrong"
import sys
def blocks(path):
    out = []
    for line in open(path).read().splitlines():
        if line.startswith("# epoch "):
            assert int(line[8:]) == len(out), line
            out.append([])
        else:
            out[-1].append(int(line))
    return out
seed1, seed2 = blocks(sys.argv[1]), blocks(sys.argv[2])
assert len(seed1) == 1 and len(seed2) == 3, (len(seed1), len(seed2))
assert all(sorted(b) == list(range(50)) for b in seed1 + seed2), "not permutations of 0..49"
assert seed1[0] != seed2[0], "--seed 1 and --seed 2 give the same order"
assert len({tuple(b) for b in seed2}) == 3, "epochs repeat the same order"
EOF

# --- SIGINT: the running step finishes, then exit 130 -----------------------------------
"$convgen" train "$lenet" --data synthetic --steps 100000 --threads 2 --log "$work/int.jsonl" >"$work/int.out" \
  2>"$work/int.err" &
pid=$!
# Once steps run (the log has lines; set-up takes longer on a loaded machine): before
# that, SIGINT ends the process at once with no summary, tested below.
for _ in $(seq 300); do [[ -s "$work/int.jsonl" ]] && break; sleep 0.1; done
sleep 0.5
sent=$(date +%s%N)
kill -INT "$pid"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
if kill -0 "$pid" 2>/dev/null; then
  fail "SIGINT: still running 5 s later"
  kill -KILL "$pid"
fi
wait "$pid"
status=$?
took_ms=$((($(date +%s%N) - sent) / 1000000))
[[ $status -eq 130 ]] || fail "SIGINT: exit status $status, want 130: $(cat "$work/int.err")"
[[ $took_ms -lt 3000 ]] || fail "SIGINT: took $took_ms ms to stop"
grep -q "^steps [0-9]" "$work/int.out" || fail "SIGINT: no summary line: $(cat "$work/int.out")"
grep -q "^steps 100000 " "$work/int.out" && fail "SIGINT: the run was not stopped"
# During set-up (importing, compiling): 130 at once, one line saying so.
"$convgen" train "$lenet" --data synthetic --steps 100000 --threads 2 >"$work/int2.out" 2>"$work/int2.err" &
pid=$!
for _ in $(seq 100); do grep -qs "^training " "$work/int2.err" && break; sleep 0.05; done
kill -INT "$pid"
wait "$pid"
status=$?
if grep -q "^steps " "$work/int2.out"; then
  : # set-up was already over on this machine: the step-finishing path, checked above
else
  [[ $status -eq 130 ]] || fail "SIGINT during set-up: exit status $status, want 130"
  grep -q "interrupted before training started" "$work/int2.err" || fail "SIGINT during set-up: $(cat "$work/int2.err")"
fi

# --- an unwritable --save, --log or --profile-json: 4, and no file (not even a temporary one) left -------
touch "$work/regular"
few=(--data synthetic --synthetic-count 50 --batch 10 --steps 2)
expect_late_error 4 "regular/y.onnx: cannot write" train "$tinym" "${few[@]}" --save "$work/regular/y.onnx"
# The destination is a directory: the temporary file is written, the rename fails.
mkdir -p "$work/saves/taken.onnx" && touch "$work/saves/taken.onnx/keep"
expect_late_error 4 "taken.onnx: cannot write" train "$tinym" "${few[@]}" --save "$work/saves/taken.onnx"
[[ "$(ls -A "$work/saves")" == "taken.onnx" && "$(ls -A "$work/saves/taken.onnx")" == "keep" ]] ||
  fail "a failed --save left files: $(ls -A "$work/saves" "$work/saves/taken.onnx")"
expect_late_error 4 "log.jsonl: cannot write" train "$tinym" "${few[@]}" --log "$work/regular/log.jsonl"
# --profile-json is written after the last step: refused before the first.
expect_late_error 4 "prof.json: cannot write" train "$tinym" "${few[@]}" --profile-json "$work/regular/prof.json"
grep -q "^steps " "$work/out" && fail "an unwritable --profile-json was found only after training: $(cat "$work/out")"

if [[ $failures -eq 0 ]]; then echo "cli.train: all checks passed"; else exit 1; fi
