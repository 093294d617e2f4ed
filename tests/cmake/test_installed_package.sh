#!/usr/bin/env bash
# find_package(convgen) and convgen_add_model() from an installed convgen only: install
# the build tree into a temporary prefix, configure and build examples/classify and
# examples/train against that prefix (Ninja and Makefiles), run them; a touched model
# rebuilds only its own library, a changed option regenerates, nothing else does; an
# unsupported or missing model stops the build with convgen's one-line message; TARGET
# picks another x86-64 feature set (checked in the emitted object code).
#   test_installed_package.sh BUILD_DIR SOURCE_DIR
set -u
build_dir="$1"
root="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Installed in one place and used from another: the package is relocatable.
prefix="$work/prefix"
cmake --install "$build_dir" --prefix "$work/staging" >"$work/install.log" 2>&1 || { cat "$work/install.log"; exit 1; }
mv "$work/staging" "$prefix"
if grep -rq "$work/staging" "$prefix/lib/cmake/convgen"; then fail "the package refers to its install prefix"; fi
for f in bin/convgen lib/libconvgen_runtime.a lib/cmake/convgen/convgenConfig.cmake \
         lib/cmake/convgen/convgenConfigVersion.cmake include/convgen/runtime/train/trainer.h share/convgen/models/lenet.onnx; do
  [[ -e "$prefix/$f" ]] || fail "install lacks $f"
done
# The examples are copied out of the tree: nothing may point into the source or build tree.
cp -r "$root/examples" "$work/examples"

configure() {  # configure SRC BIN GENERATOR [ARGS...]
  local src="$1" bin="$2" gen="$3"
  shift 3
  cmake -S "$src" -B "$bin" -G "$gen" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" "$@" \
    >"$bin.configure.log" 2>&1
}

for gen in Ninja "Unix Makefiles"; do
  tag="${gen// /_}"
  for example in classify train; do
    bin="$work/build-$example-$tag"
    if ! configure "$work/examples/$example" "$bin" "$gen"; then
      fail "$example ($gen): configure"; cat "$bin.configure.log"; continue
    fi
    if ! cmake --build "$bin" -j 2 >"$bin.build.log" 2>&1; then
      fail "$example ($gen): build"; tail -20 "$bin.build.log"; continue
    fi
    if grep -rq -e "$build_dir" -e "$root/" "$bin/CMakeCache.txt"; then
      fail "$example ($gen): the CMake cache refers to convgen's source or build tree"
    fi
  done
done

# classify: one batch of LeNet predictions and one cifar10_full prediction.
out="$work/build-classify-Ninja"
"$out/classify" >"$work/classify.txt" 2>&1 || fail "classify: exit $?: $(cat "$work/classify.txt")"
[[ $(grep -c '^lenet image [0-7]: label [0-9] predicted [0-9]$' "$work/classify.txt") -eq 8 ]] ||
  fail "classify output: $(cat "$work/classify.txt")"
grep -q '^cifar10_full synthetic image: predicted [0-9]$' "$work/classify.txt" || fail "classify: no cifar10_full line"
"$work/build-classify-Unix_Makefiles/classify" | cmp -s - "$work/classify.txt" || fail "classify: Ninja and Make builds differ"
# Two models, one Halide runtime: neither model library nor its kernels defines one.
for lib in "$out/liblenet.a" "$out/libcifar.a" "$out/convgen_models/lenet/lenet.a" "$out/convgen_models/cifar/cifar.a"; do
  if nm "$lib" 2>/dev/null | grep -q ' [TWDV] halide_'; then fail "$lib defines Halide runtime symbols"; fi
done
[[ $(nm "$prefix/lib/libconvgen_runtime.a" 2>/dev/null | grep -c ' [TW] halide_malloc$') -eq 1 ]] ||
  fail "libconvgen_runtime.a does not define the Halide runtime once"

# train: 300 steps learn; the same bits on 1 and 2 threads.
mkdir -p "$work/out1" "$work/out2"
"$work/build-train-Ninja/train" 300 2 "$work/out2" >"$work/train2.txt" 2>&1 || fail "train: exit $?: $(cat "$work/train2.txt")"
accuracy=$(sed -n 's/^test accuracy //p' "$work/train2.txt")
awk -v a="${accuracy:-0}" 'BEGIN { exit !(a >= 0.7) }' || fail "train: test accuracy ${accuracy:-none} < 0.7: $(cat "$work/train2.txt")"
"$work/build-train-Unix_Makefiles/train" 300 1 "$work/out1" >"$work/train1.txt" 2>&1 || fail "train (1 thread)"
cmp -s "$work/train1.txt" "$work/train2.txt" || fail "train: 1 and 2 threads differ: $(diff "$work/train1.txt" "$work/train2.txt")"
cmp -s "$work/out1/lenet_trained.weights" "$work/out2/lenet_trained.weights" || fail "train: saved weights differ across threads"
[[ -f "$work/out2/checkpoint/checkpoint.cgck" ]] || fail "train: no checkpoint saved"
[[ "$(sed -n 's/^reloaded test accuracy //p' "$work/train2.txt")" == "$accuracy" ]] ||
  fail "train: the reloaded weights do not reproduce the accuracy: $(cat "$work/train2.txt")"

# Rebuilds: nothing to do; a touched model regenerates only its own library; a changed
# option regenerates that model.
for gen in Ninja "Unix Makefiles"; do
  bin="$work/build-classify-${gen// /_}"
  cmake --build "$bin" >"$work/rebuild.log" 2>&1 || fail "$gen: rebuild"
  if grep -q "convgen: compiling" "$work/rebuild.log"; then fail "$gen: a no-op rebuild regenerated: $(cat "$work/rebuild.log")"; fi
done
sleep 1
touch "$prefix/share/convgen/models/lenet.onnx"
for gen in Ninja "Unix Makefiles"; do
  bin="$work/build-classify-${gen// /_}"
  cmake --build "$bin" >"$work/touch.log" 2>&1 || fail "$gen: build after touch"
  grep -q "compiling .*lenet.onnx into lenet" "$work/touch.log" || fail "$gen: touched lenet.onnx did not regenerate: $(cat "$work/touch.log")"
  if grep -q "into cifar" "$work/touch.log"; then fail "$gen: touching lenet.onnx regenerated cifar"; fi
  configure "$work/examples/classify" "$bin" "$gen" -DLENET_BATCH=4 || fail "$gen: reconfigure"
  cmake --build "$bin" >"$work/option.log" 2>&1 || fail "$gen: build after an option change"
  grep -q "into lenet" "$work/option.log" || fail "$gen: BATCH 8 -> 4 did not regenerate lenet: $(cat "$work/option.log")"
  if grep -q "into cifar" "$work/option.log"; then fail "$gen: an option of lenet regenerated cifar"; fi
  [[ $("$bin/classify" | grep -c '^lenet image') -eq 4 ]] || fail "$gen: BATCH 4 not in effect"
done

# A new convgen (here: its executable touched) regenerates every model.
sleep 1
touch "$prefix/bin/convgen"
cmake --build "$work/build-classify-Ninja" >"$work/tool.log" 2>&1 || fail "build after a new convgen"
[[ $(grep -c "convgen: compiling" "$work/tool.log") -eq 2 ]] || fail "a new convgen did not regenerate both models: $(cat "$work/tool.log")"

# Build-time errors: convgen's one line, naming the model and the op.
scratch() {  # scratch NAME CMAKE-LINES
  mkdir -p "$work/$1"
  printf 'cmake_minimum_required(VERSION 3.22)\nproject(%s LANGUAGES CXX)\nfind_package(convgen 0.1 REQUIRED)\n%s\n' \
    "$1" "$2" >"$work/$1/CMakeLists.txt"
}
hardmax="/usr/share/libonnx-testdata/data/node/test_hardmax_example/model.onnx"
scratch bad "convgen_add_model(bad MODEL \"$hardmax\")"
configure "$work/bad" "$work/build-bad" Ninja || fail "bad: configure"
if cmake --build "$work/build-bad" >"$work/bad.log" 2>&1; then fail "an unsupported model built"; fi
grep -q "^convgen: .*model.onnx.*not supported: op Hardmax" "$work/bad.log" || fail "unsupported op message: $(cat "$work/bad.log")"
if grep -q "Halide\|CMake Error" "$work/bad.log"; then fail "error output has Halide or CMake text: $(cat "$work/bad.log")"; fi
scratch missing 'convgen_add_model(missing MODEL nowhere.onnx)'
configure "$work/missing" "$work/build-missing" "Unix Makefiles" || fail "missing: configure"
if cmake --build "$work/build-missing" >"$work/missing.log" 2>&1; then fail "a missing model built"; fi
grep -q "^convgen: .*nowhere.onnx" "$work/missing.log" || fail "missing model message: $(cat "$work/missing.log")"
scratch badopt "convgen_add_model(badopt MODEL \"$prefix/share/convgen/models/lenet.onnx\" BATCH zero)"
configure "$work/badopt" "$work/build-badopt" Ninja || fail "badopt: configure"
if cmake --build "$work/build-badopt" >"$work/badopt.log" 2>&1; then fail "BATCH zero built"; fi
grep -q "^convgen: .*--batch" "$work/badopt.log" || fail "bad option message: $(cat "$work/badopt.log")"

# SCHEDULES: a changed records file regenerates.
: >"$work/records.jsonl"
scratch records "convgen_add_model(tuned MODEL \"$prefix/share/convgen/models/lenet.onnx\" SCHEDULES \"$work/records.jsonl\")"
configure "$work/records" "$work/build-records" "Unix Makefiles" || fail "records: configure"
cmake --build "$work/build-records" >"$work/records.log" 2>&1 || fail "records: build: $(tail "$work/records.log")"
sleep 1
touch "$work/records.jsonl"
cmake --build "$work/build-records" >"$work/records.log" 2>&1 || fail "records: rebuild"
grep -q "into tuned" "$work/records.log" || fail "a changed records file did not regenerate: $(cat "$work/records.log")"

# A call without MODEL or with an unknown argument stops at configure time, naming the target.
scratch nomodel 'convgen_add_model(nomodel BATCH 2)'
if configure "$work/nomodel" "$work/build-nomodel" Ninja; then fail "convgen_add_model without MODEL configured"; fi
grep -q "convgen_add_model(nomodel): MODEL <file.onnx> is required" "$work/build-nomodel.configure.log" ||
  fail "no-MODEL message: $(cat "$work/build-nomodel.configure.log")"
scratch typo "convgen_add_model(typo MODEL \"$prefix/share/convgen/models/lenet.onnx\" BACTH 2)"
if configure "$work/typo" "$work/build-typo" Ninja; then fail "convgen_add_model with an unknown argument configured"; fi
grep -q "convgen_add_model(typo): unknown arguments: BACTH;2" "$work/build-typo.configure.log" ||
  fail "unknown-argument message: $(cat "$work/build-typo.configure.log")"

# TARGET: other x86-64 feature sets, seen in the object code (they cannot run here).
lenet="$prefix/share/convgen/models/lenet.onnx"
scratch targets "convgen_add_model(wide MODEL \"$lenet\" TARGET x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41)
convgen_add_model(narrow MODEL \"$lenet\" TARGET x86-64-linux-sse41)"
configure "$work/targets" "$work/build-targets" Ninja || fail "targets: configure"
cmake --build "$work/build-targets" >"$work/targets.log" 2>&1 || fail "targets: build: $(tail "$work/targets.log")"
kernels="$work/build-targets/convgen_models"
[[ $(objdump -d "$kernels/wide/wide.a" | grep -c zmm) -gt 0 ]] || fail "AVX-512 target: no zmm registers in the kernels"
[[ $(objdump -d "$kernels/narrow/narrow.a" | grep -c 'ymm\|zmm') -eq 0 ]] || fail "SSE4.1 target: ymm/zmm registers in the kernels"
[[ $(objdump -d "$kernels/narrow/narrow.a" | grep -c xmm) -gt 0 ]] || fail "SSE4.1 target: no xmm code"

if [[ $failures -eq 0 ]]; then echo "cmake.installed_package: all checks passed"; else exit 1; fi
