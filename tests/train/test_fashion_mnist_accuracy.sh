#!/usr/bin/env bash
# The issue's accuracy floor: `convgen train` gets LeNet (models/lenet.onnx) to >= 88 %
# test accuracy on Fashion-MNIST (Debian's dataset-fashion-mnist) in <= 5 epochs. Here:
# 3 epochs, batch 64, lr 0.01 halved after 2 epochs (--lr-schedule step:2:0.5), momentum
# 0.9, the default shuffle seed, 2 threads. The run is bit-identical for every --threads
# value, so the accuracy is a fixed number; the margin is for changes of the arithmetic,
# which move it like a change of seed does. Measured when this test was written
# (test_accuracy for --seed 0 (the default), 1, 2, 3):
#   step:2:0.5   0.8974 0.8995 0.8974 0.8948   <- used: the smallest spread, >= 1.4 points above
#   constant     0.8977 0.8953 0.8875 0.8953      (seed 2 only 0.75 points above the floor)
#   cosine       0.8967    -   0.8956    -
# ~22 s on 2 idle cores (~8800 images/s; much longer when the cores are shared).
# Usage: test_fashion_mnist_accuracy.sh CONVGEN ROOT
set -u
convgen="$1"
root="$2"
floor=0.88
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$convgen" train "$root/models/lenet.onnx" --data fashion-mnist --epochs 3 --batch 64 --lr 0.01 \
  --lr-schedule step:2:0.5 --momentum 0.9 --threads 2 >"$work/out" 2>"$work/err"
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
echo "LeNet on Fashion-MNIST, 3 epochs (lr 0.01, step:2:0.5): test accuracy $accuracy (floor $floor)," \
  "$speed images/s on 2 threads"
if awk -v a="$accuracy" -v f="$floor" 'BEGIN { exit !(a >= f) }'; then
  echo "train.fashion_mnist_accuracy: passed"
else
  echo "FAIL: test accuracy $accuracy is below $floor"
  exit 1
fi
