#!/usr/bin/env python3
"""Explain where a `convgen train` run leaves PyTorch's trajectory: is convgen's step the
exact (float64) step from convgen's own state, up to activation decisions that float32
rounding may take either way?

    explain_departure.py MODEL.onnx --torchvision NAME --after AFTER.cgck [--before BEFORE.cgck]
        --data synthetic --batch B --lr LR --momentum MU --weight-decay WD
        [--near 4] [--tolerance 1e-3] [--candidates 16] [--max-flips 4] [--verbose]

BEFORE.cgck is convgen's checkpoint before the step (none: the model's initial weights,
zero momentum, step 0); AFTER.cgck the checkpoint one step later. Both are read directly
(runtime/checkpoint/checkpoint.h's format: magic, version, JSON header, float32 tensors,
CRC-32s). From BEFORE's weights, momentum buffers and BatchNormalization statistics,
torchvision.models.NAME takes that step in float64 on the same batch
(scripts/torch-train-reference's data and SGD; samples in file order, as `convgen train
--no-shuffle` takes them).

Why decisions: deep networks put some ReLU inputs, and some max-pooling windows' two
largest inputs, within float32's rounding of each other (resnet18 at 32x32: a last-block
ReLU input 5e-6 standard deviations from zero where float32's error there reaches 2e-5).
convgen's float32 may decide those either way, and one flipped unit in the last block
moves that layer's gradient by 10% -- correctly. So every ReLU/ReLU6 unit whose distance
from a threshold, and every MaxPool2d window whose gap between its two largest inputs, is
within --near times float32's largest error on that call's inputs (a float32 forward from
the same state measures it) is a candidate. If the step without flips does not match,
decisions are flipped greedily: each round tries the closest --candidates ones and keeps
the flip that most lowers the sum of the tensors' errors, up to --max-flips.

The error of a tensor (trainable value, momentum buffer, running statistic) is its largest
difference from float64's beyond one float32 unit in the last place, over its largest
change in the step. Exit 0 if the best assignment's largest error is within --tolerance
(convgen's step is the exact step, with float32's choices at near-ties), 1 if none is (a
wrong gradient or update), 2 for unreadable inputs. Needs Debian's python3-torch,
python3-torchvision and python3-onnx (/usr/bin/python3).
"""

import argparse
import importlib.machinery
import json
import math
import os
import struct
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F

PROG = "explain_departure"
HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "..", "..", "scripts", "torch-train-reference")


def die(message):
    print(f"{PROG}: {message}", file=sys.stderr)
    sys.exit(2)


def read_checkpoint(path):
    """{(name, kind): float64 array} and the header of a convgen checkpoint."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        die(f"{path}: {e}")
    if len(data) < 28 or data[:8] != b"CGCKPT\0\0":
        die(f"{path}: not a convgen checkpoint")
    if zlib.crc32(data[:-4]) != struct.unpack_from("<I", data, len(data) - 4)[0]:
        die(f"{path}: CRC mismatch")
    header_bytes = struct.unpack_from("<Q", data, 16)[0]
    header = json.loads(data[24:24 + header_bytes])
    payload = 24 + header_bytes + 8
    tensors = {}
    for t in header["tensors"]:
        raw = data[payload + t["offset"]:payload + t["offset"] + t["bytes"]]
        tensors[(t["name"], t["kind"])] = np.frombuffer(raw, dtype="<f4").astype(np.float64).reshape(t["shape"])
    return tensors, header


class ForcedActivations:
    """Replaces the function of every ReLU, ReLU6 and MaxPool2d module by one that records
    each call's input and the margin of each of its decisions (a ReLU unit's distance from
    its threshold; a pooling window's gap between its largest and second-largest input) and
    can flip chosen decisions (call index, flat unit or window index): a ReLU unit switches
    sides, a window passes its second-largest input instead."""

    def __init__(self, net):
        self.calls, self.flips, self.record = 0, set(), False
        self.inputs = []  # (call, input, margins)
        self.names = {}
        for name, m in net.named_modules():
            if isinstance(m, (torch.nn.ReLU, torch.nn.ReLU6)):
                m.forward = self.relu(name, 6.0 if isinstance(m, torch.nn.ReLU6) else None)
            elif isinstance(m, torch.nn.MaxPool2d):
                m.forward = self.max_pool(name, m)

    def begin(self, call, name, z, margins):
        self.names[call] = name
        if self.record:
            self.inputs.append((call, z.detach().clone(), margins))
        return [unit for c, unit in self.flips if c == call]

    def relu(self, name, top):
        def forward(z):
            call = self.calls
            self.calls += 1
            flat = z.detach().reshape(-1)
            margins = flat.abs() if top is None else torch.minimum(flat.abs(), (flat - top).abs())
            low = (z <= 0).reshape(-1).clone()
            high = (z >= top).reshape(-1).clone() if top is not None else torch.zeros_like(low)
            for unit in self.begin(call, name, z, margins):
                if top is not None and abs(float(flat[unit]) - top) < abs(float(flat[unit])):
                    high[unit] = ~high[unit]
                else:
                    low[unit] = ~low[unit]
            low, high = low.reshape(z.shape), high.reshape(z.shape)
            out = torch.where(low, torch.zeros_like(z), z)
            return torch.where(high, torch.full_like(z, top if top is not None else 0.0), out)
        return forward

    def max_pool(self, name, m):
        k, s, p, d = (torch.nn.modules.utils._pair(v) for v in (m.kernel_size, m.stride, m.padding, m.dilation))
        if m.ceil_mode:
            die(f"MaxPool2d '{name}' with ceil_mode: not handled")

        def forward(z):
            call = self.calls
            self.calls += 1
            n, c, h, w = z.shape
            # Each window's inputs with their flat positions in z (padding: -inf, position -1).
            padded = F.pad(z, (p[1], p[1], p[0], p[0]), value=-math.inf)
            cols = F.unfold(padded, k, dilation=d, stride=s).reshape(n, c, k[0] * k[1], -1)
            pos = F.pad(torch.arange(h * w, dtype=z.dtype).reshape(1, 1, h, w), (p[1], p[1], p[0], p[0]), value=-1)
            pos = F.unfold(pos, k, dilation=d, stride=s).reshape(1, 1, k[0] * k[1], -1).long()
            top2, which = cols.detach().topk(2, dim=2)
            gap = (top2[:, :, 0] - top2[:, :, 1]).reshape(-1)
            margins = torch.where(gap > 0, gap, torch.full_like(gap, math.inf))  # exact ties: no decision
            choice = which[:, :, 0].reshape(-1).clone()
            for unit in self.begin(call, name, z, margins):
                choice[unit] = which[:, :, 1].reshape(-1)[unit]
            index = pos.expand(n, c, -1, -1).gather(2, choice.reshape(n, c, 1, -1)).reshape(n, c, -1)
            out = z.reshape(n, c, -1).gather(2, index)
            oh = (h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
            return out.reshape(n, c, oh, -1)
        return forward

    def candidates(self, other, near):
        """(margin over float32's error, call, unit) of every decision whose margin is within
        `near` times the largest float32 error of its call's inputs: `other` holds the same
        calls from a float32 forward."""
        found = []
        for (call, z, margins), (_, z32, _) in zip(self.inputs, other.inputs):
            err = float((z32.to(z.dtype) - z).abs().max())
            if err == 0:
                continue
            for unit in torch.nonzero(margins < near * err).reshape(-1).tolist():
                found.append((float(margins[unit]) / err, call, unit))
        return sorted(found)


def main():
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--torchvision", required=True, metavar="NAME")
    p.add_argument("--before", metavar="BEFORE.cgck")
    p.add_argument("--after", required=True, metavar="AFTER.cgck")
    p.add_argument("--data", choices=["synthetic", "fashion-mnist"], required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--synthetic-count", type=int, default=6000)
    p.add_argument("--near", type=float, default=4.0, metavar="ERRORS")
    p.add_argument("--tolerance", type=float, default=1e-3)
    p.add_argument("--candidates", type=int, default=16, metavar="N", help="decisions tried per round")
    p.add_argument("--max-flips", type=int, default=4, metavar="N")
    p.add_argument("--verbose", action="store_true", help="print every assignment tried")
    args = p.parse_args()

    ref = importlib.machinery.SourceFileLoader("torch_train_reference", REFERENCE).load_module()
    torch.use_deterministic_algorithms(True)
    graph = ref.Graph(args.model)
    after, after_header = read_checkpoint(args.after)
    before, step = {}, 0
    if args.before is not None:
        before, before_header = read_checkpoint(args.before)
        step = before_header["step"]
    if after_header["step"] != step + 1:
        die(f"{args.after} is at step {after_header['step']}, not one step after {step}")

    module = ref.TorchvisionModule(args.torchvision, graph).to(torch.float64).train()
    forced = ForcedActivations(module.net)
    trainable = list(graph.trainable)
    start = {}
    for name in trainable + list(graph.state):
        kind = "value" if name in trainable else "state"
        start[name] = before.get((name, kind), graph.inits[name].astype(np.float64))
    buffers = {n: before.get((n, "momentum"), np.zeros_like(start[n])) for n in trainable}

    spec = {"chw": graph.chw, "classes": int(graph.classes)}
    data = ref.synthetic(spec, args.synthetic_count, 0) if args.data == "synthetic" else ref.fashion_mnist(spec)
    idx = ref.step_batches(data.count, args.batch, step + 1, False, 0, None)[step]
    x, y = ref.decode(data, idx, ref.parse_normalization("0,1", graph.chw[0]))
    x, y = torch.from_numpy(x).to(torch.float64), torch.from_numpy(y)

    def load_start(into):
        with torch.no_grad():
            for name, value in start.items():
                into.tensors[name].copy_(torch.from_numpy(value))

    def take_step(flips, record=False):
        load_start(module)
        forced.calls, forced.flips, forced.record, forced.inputs = 0, set(flips), record, []
        module.net.zero_grad(set_to_none=True)
        F.cross_entropy(module(x), y).backward()
        result = {}
        for name in trainable:
            w = start[name]
            g = module.tensors[name].grad.numpy() + args.weight_decay * w
            buf = args.momentum * buffers[name] + g if args.momentum else g
            result[(name, "value")] = w - args.lr * buf
            if args.momentum:
                result[(name, "momentum")] = buf
        for name in graph.state:
            result[(name, "state")] = module.tensors[name].detach().numpy().copy()
        return result

    def error(result):
        """The largest relative error of any tensor, where, and the sum over tensors."""
        worst, where, total = 0.0, None, 0.0
        for key, want in result.items():
            got = after.get(key)
            if got is None:
                die(f"{args.after} has no {key[1]} tensor '{key[0]}'")
            base = start[key[0]] if key[1] != "momentum" else buffers[key[0]]
            change = float(np.abs(want - base).max())
            if change == 0.0:
                continue
            # float32 storage: one unit in the last place of each value is rounding, not error
            excess = np.maximum(np.abs(got - want) - np.abs(want) * 2.0 ** -23, 0.0)
            e = float(excess.max()) / change
            total += e
            if e > worst:
                worst, where = e, key
        return worst, where, total

    plain = take_step((), record=True)
    # The same forward in float32 measures how far float32's rounding moves each call's inputs.
    module32 = ref.TorchvisionModule(args.torchvision, graph).to(torch.float32).train()
    forced32 = ForcedActivations(module32.net)
    load_start(module32)
    forced32.record = True
    with torch.no_grad():
        module32(x.to(torch.float32))
    candidates = forced.candidates(forced32, args.near)
    # Greedy: each round flips, among the closest --candidates decisions, the one that most
    # lowers the sum of the tensors' errors (the largest error alone would hide a flip that
    # fixes one layer while another flip's layer still dominates).
    unflipped, where, total = error(plain)
    e, flips, tried = unflipped, (), 1
    pool = [(c, u) for _, c, u in candidates[:args.candidates]]
    for _ in range(args.max_flips):
        if e <= args.tolerance:
            break
        round_best = None
        for decision in pool:
            if decision in flips:
                continue
            trial = flips + (decision,)
            te, tw, tt = error(take_step(trial))
            tried += 1
            if args.verbose:
                print(f"{PROG}: flips {list(trial)}: largest error {te:.2e} ({tw[1]} '{tw[0]}'), sum {tt:.2e}")
            if round_best is None or tt < round_best[2]:
                round_best = (te, tw, tt, trial)
        if round_best is None or round_best[2] > 0.9 * total:
            break
        e, where, total, flips = round_best
    print(f"{PROG}: step {step}: {len(candidates)} ReLU or max-pooling decisions within {args.near:g} times "
          f"float32's error of going the other way; {tried} decision assignments tried; without flips the "
          f"largest error is {unflipped:.2e}")
    for c, u in flips:
        dist = next(d for d, cc, uu in candidates if (cc, uu) == (c, u))
        print(f"{PROG}:   flipped: call {c} of module '{forced.names[c]}', decision {u}, {dist:.2f} times "
              f"float32's error from going the other way")
    worst_tensor = f"{where[1]} '{where[0]}'" if where else "no tensor changed"
    print(f"{PROG}: convgen's step against float64's{' with those flipped' if flips else ''}: largest error "
          f"{e:.2e} of a tensor's change ({worst_tensor}); tolerance {args.tolerance:g}")
    return 0 if e <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
