#!/usr/bin/env bash
# generated/ must be exactly what `convgen compile` writes for the bundled models, from
# a copy of the models at another path (no paths, timestamps or hosts in the files).
set -u
convgen="$1"
root="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0
mkdir -p "$work/elsewhere/models"
cp "$root/models/"*.onnx "$work/elsewhere/models/"
for model in lenet cifar10_full; do
  (cd "$work/elsewhere" && "$convgen" compile "models/$model.onnx" -o "out/$model" --no-cache >/dev/null) ||
    { echo "FAIL: compile $model"; failures=$((failures + 1)); continue; }
  rm -f "$work/elsewhere/out/$model/$model.a" "$work/elsewhere/out/$model/$model.weights"
  if ! diff -r "$root/generated/$model" "$work/elsewhere/out/$model"; then
    echo "FAIL: generated/$model differs from a fresh compile (run scripts/regenerate-generated)"
    failures=$((failures + 1))
  fi
  grep -rq "do not edit" "$root/generated/$model/$model.h" || { echo "FAIL: $model.h lacks do-not-edit"; failures=$((failures + 1)); }
done
if [[ $failures -eq 0 ]]; then echo "generated.up_to_date: all checks passed"; else exit 1; fi
