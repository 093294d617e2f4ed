#!/usr/bin/env bash
# End-to-end checks of `convgen compile-layer`: outputs, provenance, byte-identical
# regeneration, and a stable exit code with a one-line message naming the field for
# every kind of bad input.
set -u
convgen="$1"
# shellcheck source=helpers.sh
source "$(dirname "${BASH_SOURCE[0]}")/helpers.sh"


layer='mb2ic16ih12oc24oh12kh3ph1+bias+relu'
"$convgen" compile-layer "$layer" -o "$work/a" --name conv_a --emit stmt >/dev/null || fail "compile-layer a"
"$convgen" compile-layer "$layer" -o "$work/b" --name conv_a --emit stmt >/dev/null || fail "compile-layer b"
for f in conv_a.a conv_a.h conv_a.manifest.json conv_a.stmt; do
  [[ -f "$work/a/$f" ]] || fail "missing output $f"
  cmp -s "$work/a/$f" "$work/b/$f" || fail "$f differs between two generations of the same layer"
done
grep -q "do not edit" "$work/a/conv_a.h" || fail "header lacks the do-not-edit provenance line"
grep -q "Regenerate with: convgen compile-layer" "$work/a/conv_a.h" || fail "header lacks the regenerate command"
grep -q "$work" "$work/a/conv_a.h" "$work/a/conv_a.manifest.json" && fail "absolute paths in generated files"
ls -A "$work/a" | grep -q stage && fail "staging directory left behind"

# --print echoes the normalised descriptor; a TSV row is accepted too.
out=$("$convgen" compile-layer 'mb8ic64ih56oc64oh56kh3ph1n"res2a"' --print)
grep -q '^g1mb8ic64ih56iw56oc64oh56ow56kh3kw3sh1sw1pt1pb1pl1pr1dh0dw0$' <<<"$out" || fail "--print: $out"
out=$("$convgen" schedule $'res2\t8\t64\t56\t56\t64\t3\t3\t1\t1\t1\t1\t1\t1\t1' --verbose 2>&1)
grep -q "schedule (analytic default)" <<<"$out" || fail "schedule of a TSV row: $out"
grep -q "micro-kernel" <<<"$out" || fail "schedule --verbose says nothing of the micro-kernel: $out"

# A strategy or field the layer cannot use is refused with the reason, and the general
# path runs: grouped needs C/g to divide the vector (3 does not); kc is GEMM-only.
out=$("$convgen" schedule 'g2mb1ic6ih8oc6oh8kh3ph1' --schedule 'grouped kc=1' --verbose 2>&1) ||
  fail "schedule with refused fields: $out"
grep -q "grouped strategy refused: 3 input channels per group" <<<"$out" || fail "no grouped refusal: $out"
grep -q "kc=1 refused: depthwise" <<<"$out" || fail "no kc refusal: $out"
out=$("$convgen" schedule 'g2mb1ic8ih8oc6oh8kh3ph1' --schedule 'grouped kc=1' --verbose 2>&1) ||
  fail "schedule grouped: $out"
grep -q "strategy grouped" <<<"$out" || fail "grouped strategy not taken: $out"
grep -q "kc=1 refused: grouped" <<<"$out" || fail "no kc refusal for grouped: $out"
expect_error 2 "strategy: unknown value 'groupwise'" schedule 'g2mb1ic8ih8oc6oh8kh3ph1' --schedule groupwise

# Backward kernels: --pass names the kernel and its signature; the manifest says the pass.
bwd_layer='mb2ic16ih9oc24kh3sh2ph1+bias+relu'
"$convgen" compile-layer "$bwd_layer" --pass bwd_data -o "$work/bwd" >/dev/null || fail "compile bwd_data"
grep -q 'int conv_bwd_data(struct halide_buffer_t \*_dy_buffer, struct halide_buffer_t \*_weights_buffer, struct halide_buffer_t \*_y_buffer, struct halide_buffer_t \*_dx_buffer)' \
  "$work/bwd/conv_bwd_data.h" || fail "bwd_data signature"
grep -q '"pass": "bwd_data"' "$work/bwd/conv_bwd_data.manifest.json" || fail "bwd_data manifest pass"
"$convgen" compile-layer "$bwd_layer" --pass bwd_weights -o "$work/bwd" >/dev/null || fail "compile bwd_weights"
grep -q '_dw_buffer, struct halide_buffer_t \*_db_buffer)' "$work/bwd/conv_bwd_weights.h" || fail "bwd_weights signature"
out=$("$convgen" schedule "$bwd_layer" --pass bwd_data --verbose 2>&1) || fail "schedule --pass bwd_data: $out"
grep -q "4 residue classes" <<<"$out" || fail "no residue classes in: $out"
expect_error 2 "--pass bwd: expected fwd, bwd_data or bwd_weights" schedule "$bwd_layer" --pass bwd

"$convgen" --version | grep -q '^convgen 0\.' || fail "--version"
"$convgen" --help | grep -q compile-layer || fail "--help"
"$convgen" compile-layer --help | grep -q -- '--schedules' || fail "compile-layer --help"

expect_error 2 "ic" compile-layer 'mb1ic0ih8oc8kh3' -o "$work/x"
expect_error 2 "g" compile-layer 'g3mb1ic8ih8oc9kh3' -o "$work/x"
expect_error 2 "oh" compile-layer 'mb1ic8ih2oc8kh5' -o "$work/x"
expect_error 2 "key" compile-layer 'mb1ic8ih8oc8kh3zz4' -o "$work/x"
expect_error 2 "tensor" compile-layer 'mb4096ic4096ih256oc8kh1' -o "$work/x"
expect_error 2 "missing -o" compile-layer "$layer"
expect_error 2 "unknown command" frobnicate
# Backward-weights tap tiles sharing a kernel position (NR = 8 divides C/g = 16) stage
# C/g floats per input pixel; bounds inference once gave them C/g + NR - 1 = 23, staged
# by gathers at a third of the speed. Cross-compiled for AVX-512, whatever the CPU.
"$convgen" compile-layer 'mb8ic16ih37iw41oc24oh12kh5sh3ph1' --pass bwd_weights -o "$work/bw" --emit stmt \
  --target x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41 >/dev/null || fail "compile-layer bwd_weights"
grep -q 'allocate x_band\[float32 \* 16 \* 1 \* 41 ' "$work/bw/conv_bwd_weights.stmt" ||
  fail "bwd_weights x_band not staged at 16 floats per pixel: $(grep 'allocate x_band' "$work/bw/conv_bwd_weights.stmt")"

expect_error 2 "--emit" compile-layer "$layer" -o "$work/x" --emit pdf
expect_error 4 "missing.jsonl" compile-layer "$layer" -o "$work/x" --schedules "$work/missing.jsonl"
echo '{"format":"convgen-schedule","version":9}' >"$work/bad.jsonl"
expect_error 5 "version" compile-layer "$layer" -o "$work/x" --schedules "$work/bad.jsonl"
expect_error 7 "target" compile-layer "$layer" -o "$work/x" --target arm-64-linux
expect_error 2 "unknown field 'foo'" compile-layer "$layer" -o "$work/x" --schedule 'foo=1'
expect_error 2 "not an integer" compile-layer "$layer" -o "$work/x" --schedule 'mr=abc'
expect_error 5 "mr" compile-layer "$layer" -o "$work/x" --schedule 'mr=20'
expect_error 2 "ic" schedule 'mb1ic0ih8oc8kh3'
expect_error 2 "missing -o" emit-runtime
expect_error 7 "target" emit-runtime -o "$work/x" --target arm-64-linux
expect_error 2 "unexpected argument" emit-runtime -o "$work/x" extra
[[ -e "$work/x" && -n "$(ls -A "$work/x" 2>/dev/null)" ]] && fail "failed runs left files in $work/x"

if [[ $failures -eq 0 ]]; then echo "cli.compile_layer: all checks passed"; else exit 1; fi
