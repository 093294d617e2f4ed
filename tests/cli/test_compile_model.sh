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

cache="$work/cache"
"$convgen" compile "$root/models/cifar10_full.onnx" -o "$work/a" --cache-dir "$cache" --batch 4 --verbose \
  >/dev/null 2>"$work/log" || fail "compile cifar10_full"
for f in cifar10_full.a cifar10_full.h cifar10_full.manifest.json; do [[ -f "$work/a/$f" ]] || fail "missing $f"; done
[[ $(ar t "$work/a/cifar10_full.a" | wc -l) -eq 3 ]] || fail "want 3 kernel objects: $(ar t "$work/a/cifar10_full.a")"
grep -q "relu2 fused into conv2's epilogue" "$work/log" || fail "no Conv+Relu fusion: $(cat "$work/log")"
grep -q '"sha256": "'"$(sha256sum "$root/models/cifar10_full.onnx" | cut -c1-64)"'"' "$work/a/cifar10_full.manifest.json" ||
  fail "manifest lacks the model's SHA-256"
grep -q "+bias+relu" "$work/a/cifar10_full.manifest.json" || fail "manifest lacks the fused epilogue"
if grep -rq "$work\|$root" "$work/a"/*.h "$work/a"/*.json "$work/a/kernels"; then fail "absolute path in generated files"; fi

# A second compile comes from the cache and is byte-identical.
"$convgen" compile "$root/models/cifar10_full.onnx" -o "$work/b" --cache-dir "$cache" --batch 4 --verbose \
  >/dev/null 2>"$work/log" || fail "recompile"
[[ $(grep -c "from the cache" "$work/log") -eq 3 ]] || fail "recompile did not use the cache: $(cat "$work/log")"
diff -r "$work/a" "$work/b" >/dev/null || fail "recompile differs"

# Identical layers share one kernel: the same model's Conv twice in a row.
"$convgen" compile "$data/test_Conv2d_depthwise/model.onnx" -o "$work/d" --no-cache >/dev/null || fail "depthwise"
grep -q '"layers": \["Conv_0"\]' "$work/d/model.manifest.json" || fail "layer list: $(cat "$work/d/model.manifest.json")"

# Bad models: one line, stable code, no output directory contents left behind.
head -c 2000 "$root/models/lenet.onnx" >"$work/cut.onnx"
expect_error 6 "bad model" compile "$work/cut.onnx" -o "$work/bad1" --no-cache
[[ -z "$(ls -A "$work/bad1" 2>/dev/null)" ]] || fail "partial output left: $(ls -A "$work/bad1")"
expect_error 7 "not supported: op Tanh" compile "$data/test_Tanh/model.onnx" -o "$work/bad2" --no-cache
expect_error 4 "cannot read" compile "$work/missing.onnx" -o "$work/bad3"
expect_error 2 "not a C identifier" compile "$root/models/lenet.onnx" --name 9lives -o "$work/bad4"
"$convgen" compile --help | grep -q "usage: convgen compile" || fail "compile --help"

if [[ $failures -eq 0 ]]; then echo "cli.compile_model: all checks passed"; else exit 1; fi
