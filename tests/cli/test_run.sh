#!/usr/bin/env bash
# End-to-end checks of `convgen run` and `convgen check`: outputs as TensorProto files,
# the bundled models run, and bad data or a failing comparison exit with their codes.
set -u
convgen="$1"
# shellcheck source=helpers.sh
source "$(dirname "${BASH_SOURCE[0]}")/helpers.sh"
root="$2"
data=/usr/share/libonnx-testdata/data

case_dir="$data/pytorch-converted/test_Conv2d_depthwise_padded"
"$convgen" run "$case_dir/model.onnx" --input "$case_dir/test_data_set_0/input_0.pb" --output-dir "$work/out1" \
  >/dev/null || fail "run"
[[ -s "$work/out1/output_0.pb" ]] || fail "run wrote no output_0.pb"
# The written output is what check compares against: build a case from it and check.
mkdir -p "$work/case/test_data_set_0"
cp "$case_dir/model.onnx" "$work/case/"
cp "$case_dir/test_data_set_0/input_0.pb" "$work/case/test_data_set_0/"
cp "$work/out1/output_0.pb" "$work/case/test_data_set_0/output_0.pb"
"$convgen" check "$work/case" --rtol 0 --atol 0 >/dev/null || fail "check of run's own output (bit-exact)"
"$convgen" check "$case_dir" | grep -q "all 1 outputs pass" || fail "check $case_dir"
"$convgen" run "$case_dir/model.onnx" --input "$case_dir/test_data_set_0/input_0.pb" --output-dir "$work/out4" \
  --profile >/dev/null 2>"$work/profile" || fail "run --profile"
grep -q "GF/s" "$work/profile" && grep -q "^total" "$work/profile" || fail "no profile table: $(cat "$work/profile")"
# --threads: the same bits on two threads (a check of run's one-thread output at rtol 0);
# a thread count that is no positive integer is a usage error.
"$convgen" check "$work/case" --threads 2 --rtol 0 --atol 0 >/dev/null || fail "check --threads 2 (bit-exact)"
"$convgen" run "$case_dir/model.onnx" --input "$case_dir/test_data_set_0/input_0.pb" --output-dir "$work/out5" \
  --threads 2 >/dev/null || fail "run --threads 2"
cmp -s "$work/out1/output_0.pb" "$work/out5/output_0.pb" || fail "run --threads 2 changed the output"
"$convgen" run "$case_dir/model.onnx" --input "$case_dir/test_data_set_0/input_0.pb" --output-dir "$work/out6" \
  --threads 0 >/dev/null 2>"$work/threads0"
[[ $? -eq 2 ]] && grep -q "threads 0: expected a positive integer" "$work/threads0" || fail "run --threads 0: $(cat "$work/threads0")"

# A batch of 4 splits into calls of one sample (lenet never mixes samples), --verbose says
# so, and its outputs are the same bits on 1 and 3 threads; --per-call-batch 4 runs it
# whole; a per-call batch that does not divide the batch is a usage error.
/usr/bin/python3 - "$work/batch4.pb" <<'PY' || fail "batch-4 input"
import sys, numpy as np
from onnx import numpy_helper
x = np.random.default_rng(7).standard_normal((4, 1, 28, 28)).astype(np.float32)
open(sys.argv[1], "wb").write(numpy_helper.from_array(x, "data").SerializeToString())
PY
lenet="$root/models/lenet.onnx"
"$convgen" run "$lenet" --input "$work/batch4.pb" --output-dir "$work/split1" --verbose >/dev/null 2>"$work/split.err" ||
  fail "run batch 4: $(cat "$work/split.err")"
grep -q "batch 4: 4 calls of batch 1" "$work/split.err" || fail "run --verbose does not say how the batch splits: $(cat "$work/split.err")"
"$convgen" run "$lenet" --input "$work/batch4.pb" --output-dir "$work/split3" --threads 3 >/dev/null ||
  fail "run batch 4 --threads 3"
cmp -s "$work/split1/output_0.pb" "$work/split3/output_0.pb" || fail "split calls: --threads 3 changed the output"
"$convgen" run "$lenet" --input "$work/batch4.pb" --output-dir "$work/whole" --per-call-batch 4 --verbose >/dev/null \
  2>"$work/whole.err" || fail "run --per-call-batch 4: $(cat "$work/whole.err")"
grep -q "batch 4: run whole (one call, as asked)" "$work/whole.err" || fail "--per-call-batch 4: $(cat "$work/whole.err")"
expect_error 2 "--per-call-batch 3: not a divisor of the batch 4" run "$lenet" --input "$work/batch4.pb" \
  --output-dir "$work/x" --per-call-batch 3

# The scale rule: an error of 1e-6 of max |want| on the element nearest 0 fails the
# per-element rule (rtol 1e-3, atol 1e-7) and passes the scale one (1e-5) -- unless it is
# turned off or tightened; 1e-4 of max |want| fails both.
perturb() {  # from to fraction
  /usr/bin/python3 - "$@" <<'PY'
import sys, numpy as np, onnx
from onnx import numpy_helper
t = onnx.load_tensor(sys.argv[1]); a = numpy_helper.to_array(t).copy()
i = np.unravel_index(np.argmin(np.abs(a)), a.shape)
a[i] += np.float32(float(sys.argv[3]) * np.abs(a).max())
open(sys.argv[2], "wb").write(numpy_helper.from_array(a, t.name).SerializeToString())
PY
}
perturb "$work/out1/output_0.pb" "$work/case/test_data_set_0/output_0.pb" 1e-6 || fail "perturb"
"$convgen" check "$work/case" >"$work/scale.out" || fail "scale rule: $(cat "$work/scale.out")"
grep -q "pass (scale: " "$work/scale.out" || fail "scale rule not reported: $(cat "$work/scale.out")"
expect_error 9 "differ beyond rtol 0.001 atol 1e-07" check "$work/case" --scale-tolerance 0
expect_error 9 "and 1e-07 of max |want|" check "$work/case" --scale-tolerance 1e-7
expect_error 2 "--scale-tolerance -1: expected a non-negative number" check "$work/case" --scale-tolerance -1
perturb "$work/out1/output_0.pb" "$work/case/test_data_set_0/output_0.pb" 1e-4 || fail "perturb"
expect_error 9 "differ" check "$work/case"

# A wrong expected output fails the check with code 9.
cp "$data/pytorch-converted/test_Conv2d/test_data_set_0/output_0.pb" "$work/case/test_data_set_0/output_0.pb"
expect_error 9 "differ" check "$work/case"
# Bad data: not a tensor file; no data for an input.
echo "not a tensor" >"$work/bad.pb"
expect_error 8 "bad data" run "$case_dir/model.onnx" --input "$work/bad.pb" --output-dir "$work/out2"
expect_error 8 "no data for input" run "$case_dir/model.onnx" --output-dir "$work/out3"
expect_error 7 "not supported: op Hardmax" check "$data/node/test_hardmax_example"
# A case's tolerances file with an unknown key; a case directory without data sets;
# more input files than the model has inputs.
echo "rtol 1e-3" >"$work/case/tolerances"
echo "slack 2" >>"$work/case/tolerances"
expect_error 8 "case/tolerances: unknown key 'slack'" check "$work/case"
mkdir -p "$work/empty"
cp "$case_dir/model.onnx" "$work/empty/"
expect_error 8 "empty: no test_data_set_" check "$work/empty"
expect_error 8 "2 inputs given, the model has 1" run "$case_dir/model.onnx" --input "$case_dir/test_data_set_0/input_0.pb" \
  --input "$case_dir/test_data_set_0/input_0.pb" --output-dir "$work/out5"
"$convgen" run --help | grep -q "usage: convgen run" || fail "run --help"
"$convgen" check --help | grep -q "usage: convgen check" || fail "check --help"

if [[ $failures -eq 0 ]]; then echo "cli.run: all checks passed"; else exit 1; fi
