#!/usr/bin/env bash
# generated/ must be exactly what `convgen compile` writes for the bundled models, from
# a copy of the models at another path (no paths, timestamps or hosts in the files), at
# the target scripts/regenerate-generated pins.
set -u
convgen="$1"
root="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0
mkdir -p "$work/elsewhere/models"
target="$(sed -n 's/^target=//p' "$root/scripts/regenerate-generated")"
[[ -n $target ]] || { echo "FAIL: no pinned target in scripts/regenerate-generated"; exit 1; }
cp "$root/models/"*.onnx "$work/elsewhere/models/"
for model in lenet cifar10_full; do
  (cd "$work/elsewhere" && "$convgen" compile "models/$model.onnx" -o "out/$model" --target "$target" --no-cache >/dev/null) ||
    { echo "FAIL: compile $model"; failures=$((failures + 1)); continue; }
  rm -f "$work/elsewhere/out/$model/$model.a" "$work/elsewhere/out/$model/$model.weights"
  if ! diff -r "$root/generated/$model" "$work/elsewhere/out/$model"; then
    echo "FAIL: generated/$model differs from a fresh compile (run scripts/regenerate-generated)"
    failures=$((failures + 1))
  fi
  grep -rq "do not edit" "$root/generated/$model/$model.h" || { echo "FAIL: $model.h lacks do-not-edit"; failures=$((failures + 1)); }
done
for spec in "lenet 64 60000,10000" "cifar10_full 100 50000,10000"; do
  read -r model batch samples <<<"$spec"
  name="${model}_train"
  (cd "$work/elsewhere" && "$convgen" compile "models/$model.onnx" --train --name "$name" --batch "$batch" \
    --samples "$samples" -o "out/$name" --target "$target" --no-cache >/dev/null) ||
    { echo "FAIL: compile --train $model"; failures=$((failures + 1)); continue; }
  rm -f "$work/elsewhere/out/$name/$name.a" "$work/elsewhere/out/$name/$name.weights"
  if ! diff -r "$root/generated/$name" "$work/elsewhere/out/$name"; then
    echo "FAIL: generated/$name differs from a fresh compile (run scripts/regenerate-generated)"
    failures=$((failures + 1))
  fi
  grep -q "do not edit" "$root/generated/$name/$name.cpp" || { echo "FAIL: $name.cpp lacks do-not-edit"; failures=$((failures + 1)); }
done
if [[ $failures -eq 0 ]]; then echo "generated.up_to_date: all checks passed"; else exit 1; fi
