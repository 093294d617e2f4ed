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

# expect_refused LINE PATTERN WHAT: LINE appended to runtime/ops/tensor.h of the copy must
# fail the check with a message matching PATTERN; the file is restored afterwards.
planted="$scratch/runtime/ops/tensor.h"
cp "$planted" "$scratch/tensor.h.orig"
expect_refused() {
  echo "$1" >>"$planted"
  local out
  if out="$(python3 "$check" "$scratch")"; then
    echo "FAIL: $3 passed the check" >&2
    exit 1
  fi
  grep -q "$2" <<<"$out" || { echo "FAIL: $3 is not named: $out" >&2; exit 1; }
  cp "$scratch/tensor.h.orig" "$planted"
}
expect_refused '#include "generator/conv/jit.h"' 'runtime/ops/tensor.h:.*may not include generator/conv/jit.h' \
  "an upward include (runtime/ops -> generator/conv)"
expect_refused '#include "ops.h"' 'runtime/ops/tensor.h:.*"ops.h" without its folder' \
  "a bare include of a project header"
python3 "$check" "$scratch" >/dev/null
echo "layering: clean tree passes, planted upward and bare includes fail"
