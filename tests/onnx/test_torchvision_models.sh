#!/usr/bin/env bash
# Every convolutional classifier of torchvision 0.14 (and VGG-11, SqueezeNet 1.0), and
# its FCN, DeepLabV3 (ResNet-50 and MobileNetV3 backbones) and LR-ASPP segmentation models,
# exported from PyTorch with its own outputs (scripts/make-torchvision-models) must pass
# `convgen check` -- with atol 0, so that each output passes by rtol 1e-3 per element or
# by the scale rule (1e-5 of max |want|), never by an atol larger than tiny logits. The
# exported files (~2 GB) live in a temporary directory, each removed once checked.
set -u
convgen="$1"
root="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0
"$root/scripts/make-torchvision-models" "$work" >/dev/null 2>"$work/export.log" ||
  { echo "FAIL: export: $(grep -v Warning "$work/export.log" | tail -3)"; exit 1; }
models=(alexnet vgg11 vgg11_bn resnet18 resnet50 resnext50_32x4d wide_resnet50_2 densenet121 squeezenet1_0
        squeezenet1_1 mobilenet_v2 mobilenet_v3_small mobilenet_v3_large shufflenet_v2_x1_0 mnasnet1_0 efficientnet_b0
        regnet_x_400mf regnet_y_400mf googlenet inception_v3 convnext_tiny
        fcn_resnet50 deeplabv3_resnet50 deeplabv3_mobilenet_v3_large lraspp_mobilenet_v3_large)
for model in "${models[@]}"; do
  if "$convgen" check "$work/$model" --atol 0 >"$work/$model.out" 2>&1; then
    echo "$model: $(head -n 1 "$work/$model.out")"
  else
    echo "FAIL: $model: $(cat "$work/$model.out")"
    failures=$((failures + 1))
  fi
  rm -rf "${work:?}/$model"
done
if [[ $failures -eq 0 ]]; then echo "models.torchvision: all ${#models[@]} pass"; else exit 1; fi
