#!/usr/bin/env bash
# The forward and backward sweeps again, on the AVX-512 target, where the CPU runs it
# (every kernel bit-exact against the references; the "sweep plan:" and "backward sweep
# plan:" coverage checks are tuned to the default target's vector width and are left
# out). Skipped (77) elsewhere.
#   tests/conv/sweep_avx512.sh FORWARD_SWEEP BACKWARD_SWEEP
set -u
for flag in avx512f avx512bw avx512dq avx512vl avx512cd; do
  grep -qw "$flag" /proc/cpuinfo || { echo "sweep.avx512: this CPU lacks $flag: skipped"; exit 77; }
done
export CONVGEN_SWEEP_TARGET=x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41
log="$(mktemp -d)"
trap 'rm -rf "$log"' EXIT
"$1" '~*sweep plan:*' >"$log/fwd" 2>&1 &
fwd=$!
"$2" '~*sweep plan:*' >"$log/bwd" 2>&1 &
bwd=$!
status=0
wait $fwd || { tail -40 "$log/fwd"; status=1; }
wait $bwd || { tail -40 "$log/bwd"; status=1; }
tail -n 2 "$log/fwd" "$log/bwd"
exit $status
