#!/usr/bin/env bash
# The issue's accuracy floor: `convgen train` gets LeNet (models/lenet.onnx) to >= 88 %
# test accuracy on Fashion-MNIST (Debian's dataset-fashion-mnist) in <= 5 epochs. Here:
# 3 epochs, batch 64, lr 0.01, momentum 0.9, the default shuffle seed, 2 threads. The run
# is bit-identical for every --threads value, so the accuracy is a fixed number (0.8977
# when this test was written; seeds 1-3 gave SEEDS_PLACEHOLDER). Takes ~30-45 s on 2 cores.
# Usage: test_fashion_mnist_accuracy.sh CONVGEN ROOT
set -u
convgen="$1"
root="$2"
floor=0.88
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$convgen" train "$root/models/lenet.onnx" --data fashion-mnist --epochs 3 --batch 64 --lr 0.01 --momentum 0.9 \
  --threads 2 >"$work/out" 2>"$work/err"
status=$?
cat "$work/out"
if [[ $status -ne 0 ]]; then
  echo "FAIL: convgen train exited $status: $(cat "$work/err")"
  exit 1
fi
accuracy=$(sed -n 's/^test_accuracy \([0-9.]*\) .*/\1/p' "$work/out")
speed=$(sed -n 's/^steps .* images_per_s \([0-9.]*\) .*/\1/p' "$work/out")
if [[ -z "$accuracy" ]]; then
  echo "FAIL: no test_accuracy line"
  exit 1
fi
echo "LeNet on Fashion-MNIST, 3 epochs: test accuracy $accuracy (floor $floor), $speed images/s on 2 threads"
if awk -v a="$accuracy" -v f="$floor" 'BEGIN { exit !(a >= f) }'; then
  echo "train.fashion_mnist_accuracy: passed"
else
  echo "FAIL: test accuracy $accuracy is below $floor"
  exit 1
fi
