#!/usr/bin/env bash
# Includes point down the layers (scripts/check-layering), and the check itself fails on
# an upward include and on a bare one planted into a copy of the tree.
#   test_layering.sh SOURCE_ROOT
set -euo pipefail
root="$1"
check="$root/scripts/check-layering"
python3 "$check" "$root"

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for top in schedules runtime generator bench examples; do cp -r "$root/$top" "$scratch/"; done
python3 "$check" "$scratch" >/dev/null

planted="$scratch/runtime/ops/tensor.h"
cp "$planted" "$scratch/tensor.h.orig"
echo '#include "generator/conv/jit.h"' >>"$planted"
if out="$(python3 "$check" "$scratch")"; then
  echo "FAIL: an upward include (runtime/ops -> generator/conv) passed the check" >&2
  exit 1
fi
grep -q 'runtime/ops/tensor.h:.*may not include generator/conv/jit.h' <<<"$out" ||
  { echo "FAIL: the upward include is not named: $out" >&2; exit 1; }

cp "$scratch/tensor.h.orig" "$planted"
echo '#include "ops.h"' >>"$planted"
if out="$(python3 "$check" "$scratch")"; then
  echo "FAIL: a bare include of a project header passed the check" >&2
  exit 1
fi
grep -q 'runtime/ops/tensor.h:.*"ops.h" without its folder' <<<"$out" ||
  { echo "FAIL: the bare include is not named: $out" >&2; exit 1; }
echo "layering: clean tree passes, planted upward and bare includes fail"
