#!/usr/bin/env bash
# End-to-end checks of `convgen compile`: outputs and provenance, identical layers
# sharing kernels, byte-identical recompiles through the kernel cache, and bad models
# failing with one line, a stable code and nothing left behind.
set -u
convgen="$1"
# shellcheck source=helpers.sh
source "$(dirname "${BASH_SOURCE[0]}")/helpers.sh"
root="$2"
data=/usr/share/libonnx-testdata/data/pytorch-converted
hardmax=/usr/share/libonnx-testdata/data/node/test_hardmax_example/model.onnx  # an op convgen does not claim

cache="$work/cache"
"$convgen" compile "$root/models/cifar10_full.onnx" -o "$work/a" --cache-dir "$cache" --batch 4 --verbose \
  >/dev/null 2>"$work/log" || fail "compile cifar10_full"
for f in cifar10_full.a cifar10_full.h cifar10_full.manifest.json; do [[ -f "$work/a/$f" ]] || fail "missing $f"; done
# Three convolutions and the classifier Gemm, which runs as a 1x1 convolution.
[[ $(ar t "$work/a/cifar10_full.a" | wc -l) -eq 4 ]] || fail "want 4 kernel objects: $(ar t "$work/a/cifar10_full.a")"
grep -q "relu2 fused into conv2's epilogue" "$work/log" || fail "no Conv+Relu fusion: $(cat "$work/log")"
grep -q '"sha256": "'"$(sha256sum "$root/models/cifar10_full.onnx" | cut -c1-64)"'"' "$work/a/cifar10_full.manifest.json" ||
  fail "manifest lacks the model's SHA-256"
grep -q "+bias+relu" "$work/a/cifar10_full.manifest.json" || fail "manifest lacks the fused epilogue"
if grep -rq "$work\|$root" "$work/a"/*.h "$work/a"/*.json "$work/a/kernels"; then fail "absolute path in generated files"; fi
# The default target is host, resolved: the manifest, the regenerate command and the
# driver's CPU check name one feature string, never "host".
target=$(sed -n 's/.*"target": "\([^"]*\)".*/\1/p' "$work/a/cifar10_full.manifest.json" | head -n 1)
[[ $target == x86-64-linux-* ]] || fail "manifest target: '$target'"
grep -q "constexpr char kTarget\[\] = \"$target\";" "$work/a/cifar10_full.cpp" || fail "driver lacks kTarget $target"
grep -q "require_cpu_features(kTarget, \"model cifar10_full\")" "$work/a/cifar10_full.cpp" ||
  fail "driver constructor does not check the CPU"
grep -q -- "--target $target" "$work/a/cifar10_full.h" || fail "regenerate command lacks --target $target"
if grep -q -- "--target host" "$work/a/cifar10_full.h"; then fail "unresolved host target in provenance"; fi

# A second compile comes from the cache and is byte-identical.
"$convgen" compile "$root/models/cifar10_full.onnx" -o "$work/b" --cache-dir "$cache" --batch 4 --verbose \
  >/dev/null 2>"$work/log" || fail "recompile"
[[ $(grep -c "from the cache" "$work/log") -eq 4 ]] || fail "recompile did not use the cache: $(cat "$work/log")"
diff -r "$work/a" "$work/b" >/dev/null || fail "recompile differs"

# Identical layers share one kernel: the same model's Conv twice in a row.
"$convgen" compile "$data/test_Conv2d_depthwise/model.onnx" -o "$work/d" --no-cache >/dev/null || fail "depthwise"
grep -q '"layers": \["Conv_0"\]' "$work/d/model.manifest.json" || fail "layer list: $(cat "$work/d/model.manifest.json")"

# Bad models: one line, stable code, no output directory contents left behind.
head -c 2000 "$root/models/lenet.onnx" >"$work/cut.onnx"
expect_error 6 "bad model" compile "$work/cut.onnx" -o "$work/bad1" --no-cache
[[ -z "$(ls -A "$work/bad1" 2>/dev/null)" ]] || fail "partial output left: $(ls -A "$work/bad1")"
expect_error 7 "not supported: op Hardmax" compile "$hardmax" -o "$work/bad2" --no-cache
expect_error 4 "cannot read" compile "$work/missing.onnx" -o "$work/bad3"
expect_error 2 "not a C identifier" compile "$root/models/lenet.onnx" --name 9lives -o "$work/bad4"
expect_error 2 "--namespace app::9x: not a C++ namespace" compile "$root/models/lenet.onnx" --namespace app::9x -o "$work/bad9"
"$convgen" compile --help | grep -q "usage: convgen compile" || fail "compile --help"

# --train: the training driver, its kernels for every pass at every size, provenance.
"$convgen" compile "$root/models/lenet.onnx" --train --batch 8 --samples 20 -o "$work/t" --cache-dir "$cache" \
  >"$work/out" || fail "compile --train"
for f in lenet.a lenet.h lenet.cpp lenet.weights lenet.manifest.json; do [[ -f "$work/t/$f" ]] || fail "--train: missing $f"; done
grep -q '"training": {"batch": 8, "micro_batch": 2, "sample_counts": \[20\]}' "$work/t/lenet.manifest.json" ||
  fail "--train manifest: $(grep training "$work/t/lenet.manifest.json")"
grep -q "class Trainer" "$work/t/lenet.h" || fail "--train header lacks the Trainer class"
grep -q 'require_cpu_features("x86-64-linux-[^"]*", "training driver lenet")' "$work/t/lenet.cpp" ||
  fail "--train: the Trainer constructor does not check the CPU"
grep -q "Regenerate with: convgen compile lenet.onnx --train --name lenet --batch 8 --samples 20" "$work/t/lenet.cpp" ||
  fail "--train provenance: $(head -3 "$work/t/lenet.cpp")"
kernels=$(grep -c '^//   .* convgen_\(fwd\|bwd_data\|bwd_weights\)_' "$work/t/lenet.h")
[[ $(ar t "$work/t/lenet.a" | wc -l) -eq $kernels ]] || fail "--train: $kernels kernels listed, archive has $(ar t "$work/t/lenet.a" | wc -l)"
grep -q "conv1 .*bwd_weights" "$work/t/lenet.h" || fail "--train: no conv1 backward-weights kernel"
if grep -q "conv1 .*bwd_data" "$work/t/lenet.h"; then fail "--train: conv1 needs no backward-data kernel"; fi
if grep -rq "$work\|$root" "$work/t"/*.h "$work/t"/*.cpp "$work/t"/*.json; then fail "--train: absolute path in generated files"; fi
"$convgen" compile "$root/models/lenet.onnx" --train --batch 8 --samples 20 -o "$work/t2" --cache-dir "$cache" \
  >/dev/null || fail "compile --train again"
diff -r "$work/t" "$work/t2" >/dev/null || fail "--train recompile differs"
expect_error 2 "need --train" compile "$root/models/lenet.onnx" --samples 100 -o "$work/bad5"
expect_error 2 "larger than --batch" compile "$root/models/lenet.onnx" --train --batch 8 --micro-batch 9 -o "$work/bad6"
expect_error 2 "--samples" compile "$root/models/lenet.onnx" --train --samples 100,x -o "$work/bad7"
expect_error 2 "--per-call-batch is for inference drivers" compile "$root/models/lenet.onnx" --train --per-call-batch 2 \
  -o "$work/bad10"
expect_error 2 "--per-call-batch 3: not a divisor of the batch 4" compile "$root/models/lenet.onnx" --batch 4 \
  --per-call-batch 3 -o "$work/bad11"
expect_error 7 "Hardmax" compile "$hardmax" --train -o "$work/bad8"

if [[ $failures -eq 0 ]]; then echo "cli.compile_model: all checks passed"; else exit 1; fi
