#!/usr/bin/env bash
# End-to-end checks of `convgen inspect`: a real ONNX model prints its layer graph, and
# bad model files give one stderr line with the stable exit code (docs/exit-codes.md).
set -u
convgen="$1"
# shellcheck source=helpers.sh
source "$(dirname "${BASH_SOURCE[0]}")/helpers.sh"
data=/usr/share/libonnx-testdata/data/pytorch-converted
hardmax=/usr/share/libonnx-testdata/data/node/test_hardmax_example/model.onnx  # an op convgen does not claim


"$convgen" inspect "$data/test_Conv2d_groups/model.onnx" --batch 3 >"$work/out" || fail "inspect Conv2d_groups"
grep -q "^Conv " "$work/out" || fail "no Conv line: $(cat "$work/out")"
grep -q "layer g2mb2" "$work/out" || fail "no grouped layer descriptor: $(cat "$work/out")"

expect_error 4 "cannot read" inspect "$work/missing.onnx"
head -c 100 "$data/test_Conv2d/model.onnx" >"$work/cut.onnx"
expect_error 6 "bad model" inspect "$work/cut.onnx"
expect_error 7 "not supported: op Hardmax" inspect "$hardmax"
expect_error 7 "3-D" inspect "$data/test_Conv3d/model.onnx"
expect_error 2 "--batch 0" inspect "$data/test_Conv2d/model.onnx" --batch 0
expect_error 2 "missing MODEL" inspect
"$convgen" inspect --help | grep -q "usage: convgen inspect" || fail "inspect --help"

if [[ $failures -eq 0 ]]; then echo "cli.inspect: all checks passed"; else exit 1; fi
