#!/usr/bin/env bash
# Segmentation training against PyTorch training the nn.Module itself: the U-Net
# (ConvTranspose up-path k2 s2 and k3 s2 p1 output_padding 1, Concat skips, BatchNorm)
# and the FCN-style network (bilinear Resize) of scripts/make-training-benchmark-models,
# 4 classes at 3x32x32, exported in training mode. scripts/torch-train-reference --module
# NAME trains the module with F.cross_entropy(ignore_index=255) over [N, 4, 32, 32]
# logits; convgen trains the export on 2 threads. 50 steps, batch 16 (micro-batches of
# 4), lr 0.02, momentum 0.9, weight decay 5e-4, synthetic label maps (each pixel's class
# is its first channel's byte bucket, bytes 248 and up unlabelled) in file order. The
# loss of every step within 1e-4 relative and every tensor (running statistics too)
# within 1e-3 absolute (measured on AMD EPYC Zen 5: losses 1.8e-6, weights 1.1e-4, running
# means 2.9e-4; with the ConvTranspose weights left untrained on PyTorch's side the
# losses differ by 1e-3 by step 29 and the test fails). Then the bits: the
# U-Net's trained model is byte-identical on 1, 2 and 3 threads and with --intra-kernel,
# and the test split reports pixel accuracy and mean IoU.
# Usage: test_torch_equivalence_segmentation.sh CONVGEN ROOT
set -u
convgen="$1"
root="$2"
py=/usr/bin/python3 # Debian's python3 with python3-torch, python3-onnx
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

"$root/scripts/make-training-benchmark-models" "$work" unet_small fcn_small >/dev/null 2>"$work/export.err" ||
  { echo "FAIL: export: $(tail -3 "$work/export.err")"; exit 1; }
common=(--data synthetic --batch 16 --steps 50 --lr 0.02 --momentum 0.9 --weight-decay 0.0005 --no-shuffle
        --synthetic-count 512 --ignore-index 255)
for name in unet_small fcn_small; do
  model="$work/$name.onnx"
  "$py" "$root/scripts/torch-train-reference" "$model" --module "$name" "${common[@]}" \
    --out "$work/$name.ref.json" >"$work/$name.ref.out" 2>&1 ||
    { fail "$name: torch-train-reference failed: $(cat "$work/$name.ref.out")"; continue; }
  "$convgen" train "$model" "${common[@]}" --threads 2 --log "$work/$name.jsonl" --save "$work/$name.2.onnx" \
    >"$work/$name.out" 2>"$work/$name.err" || { fail "$name: convgen train failed: $(cat "$work/$name.err")"; continue; }
  grep -qE "^test_pixel_accuracy [0-9.]+ test_mean_iou [0-9.]+ " "$work/$name.out" ||
    fail "$name: no pixel accuracy and mean IoU: $(cat "$work/$name.out")"
  "$py" "$here/compare_training.py" --name "$name" --reference "$work/$name.ref.json" --log "$work/$name.jsonl" \
    --saved "$work/$name.2.onnx" --initial "$model" --loss-rtol 1e-4 --weight-atol 1e-3 ||
    fail "$name: convgen and PyTorch differ (above)"
done
for run in "--threads 1" "--threads 3" "--threads 2 --intra-kernel"; do
  # shellcheck disable=SC2086
  "$convgen" train "$work/unet_small.onnx" "${common[@]}" $run --save "$work/unet_small.other.onnx" \
    >/dev/null 2>"$work/other.err" || { fail "unet_small $run: $(cat "$work/other.err")"; continue; }
  cmp -s "$work/unet_small.2.onnx" "$work/unet_small.other.onnx" || fail "unet_small: $run trains other bits than --threads 2"
done
if [[ $failures -eq 0 ]]; then echo "train.torch_equivalence_segmentation: all checks passed"; else exit 1; fi
