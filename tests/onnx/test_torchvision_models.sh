#!/usr/bin/env bash
# ResNet-18, SqueezeNet 1.0, MobileNetV2, AlexNet and VGG-11 exported from PyTorch with
# its own outputs (scripts/make-torchvision-models) must pass `convgen check`. The
# exported files (~800 MB) live in a temporary directory removed afterwards.
set -u
convgen="$1"
root="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0
"$root/scripts/make-torchvision-models" "$work" >/dev/null 2>"$work/export.log" ||
  { echo "FAIL: export: $(grep -v Warning "$work/export.log" | tail -3)"; exit 1; }
for model in resnet18 squeezenet1_0 mobilenet_v2 alexnet vgg11; do
  if "$convgen" check "$work/$model" >"$work/$model.out" 2>&1; then
    echo "$model: $(head -n 1 "$work/$model.out")"
  else
    echo "FAIL: $model: $(cat "$work/$model.out")"
    failures=$((failures + 1))
  fi
  rm -rf "${work:?}/$model"
done
if [[ $failures -eq 0 ]]; then echo "models.torchvision: all five pass"; else exit 1; fi
