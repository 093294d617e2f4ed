#!/usr/bin/env python3
"""Compare a `convgen train` run with the PyTorch reference (scripts/torch-train-reference).

    compare_training.py --reference REF.json --log RUN.jsonl --saved TRAINED.onnx
                        [--initial MODEL.onnx] [--loss-rtol 1e-4] [--weight-atol 1e-3]
                        [--spread REF2.json [--spread-factor 4]]

REF.json: the reference's per-step losses and final trainable weights. RUN.jsonl: convgen's
--log (one JSON object a line; the "loss" field is compared). TRAINED.onnx: convgen's
--save. With --initial (the model trained from), the saved model must keep every other
initializer bit for bit, and the change of each trainable tensor is printed next to its
error (a tolerance above the change would make that tensor's check vacuous: warned).

Pass: the log has exactly the reference's steps 0..S-1, each loss finite and within
--loss-rtol relative of the reference's, and every reference tensor is in the saved model
with its shape, finite and within --weight-atol absolute.

--spread REF2.json (repeatable): PyTorch's own run of the same training in another
configuration (--float64: the exact trajectory's stand-in; --threads 2: another summation
order); the largest drift of any of them counts. Deep networks on small
batches amplify rounding, so after a few steps float32 PyTorch is not within 1e-4 of its
float64 self; the tolerances then grow with PyTorch's own drift: step i's loss within loss-rtol + F * (the largest relative loss
difference of REF and REF2 up to step i), each tensor within weight-atol + F * (the
largest difference of REF and REF2 in it). Early steps, where a wrong gradient shows
first, stay tight. Every violation is printed; the
exit status is 1 if there is any (2 for unreadable inputs). Needs numpy and onnx (Debian's
python3-onnx: run with /usr/bin/python3).
"""

import argparse
import json
import math
import sys

import numpy as np
import onnx
from onnx import numpy_helper

PROG = "compare_training"


def die(message):
    print(f"{PROG}: {message}", file=sys.stderr)
    sys.exit(2)


def load_reference(path):
    try:
        with open(path) as f:
            ref = json.load(f)
    except (OSError, ValueError) as e:
        die(f"{path}: cannot read the reference JSON: {e}")
    for key in ("losses", "weights"):
        if key not in ref:
            die(f"{path}: the reference has no '{key}'")
    if not ref["losses"]:
        die(f"{path}: the reference has no steps")
    if "steps" in ref and ref["steps"] != len(ref["losses"]):
        die(f"{path}: 'steps' is {ref['steps']} but there are {len(ref['losses'])} losses")
    if not ref["weights"]:
        die(f"{path}: the reference has no weights")
    return ref


def load_log(path):
    records = []
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        die(f"{path}: cannot read the training log: {e}")
    for n, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except ValueError as e:
            die(f"{path}:{n}: not JSON ({e}): {line!r}")
        if not isinstance(record, dict) or "step" not in record or "loss" not in record:
            die(f"{path}:{n}: no 'step' and 'loss': {line!r}")
        records.append(record)
    return records


def load_initializers(path):
    try:
        model = onnx.load(path)
    except Exception as e:  # noqa: BLE001 - any parse failure
        die(f"{path}: cannot read the ONNX model: {e}")
    inits = {}
    for t in model.graph.initializer:
        if t.name in inits:
            die(f"{path}: initializer '{t.name}' appears twice")
        inits[t.name] = numpy_helper.to_array(t)
    return inits


def main():
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--reference", required=True, metavar="REF.json")
    p.add_argument("--log", required=True, metavar="RUN.jsonl")
    p.add_argument("--saved", required=True, metavar="TRAINED.onnx")
    p.add_argument("--initial", metavar="MODEL.onnx")
    p.add_argument("--loss-rtol", type=float, default=1e-4)
    p.add_argument("--weight-atol", type=float, default=1e-3)
    p.add_argument("--spread", metavar="REF2.json", action="append", default=[],
                   help="PyTorch's run in another configuration (repeatable: the largest drift counts)")
    p.add_argument("--spread-factor", type=float, default=4.0)
    p.add_argument("--name", default="", help="a label for the printed lines")
    args = p.parse_args()
    label = f"{args.name}: " if args.name else ""

    ref = load_reference(args.reference)
    log = load_log(args.log)
    saved = load_initializers(args.saved)
    initial = load_initializers(args.initial) if args.initial else None
    spreads = [load_reference(path) for path in args.spread]
    spread = spreads[0] if spreads else None
    violations = []

    # --- losses, step by step
    ref_losses = [float(v) for v in ref["losses"]]
    loss_tolerance, drift = [], 0.0
    for i, want in enumerate(ref_losses):
        for other in spreads:
            if i < len(other["losses"]):
                drift = max(drift, abs(float(other["losses"][i]) - want) / max(abs(want), 1e-30))
        loss_tolerance.append(args.loss_rtol + args.spread_factor * drift if spread is not None else args.loss_rtol)
    if spread is not None:
        for path, other in zip(args.spread, spreads):
            if len(other["losses"]) != len(ref_losses):
                die(f"{path}: {len(other['losses'])} steps, the reference {len(ref_losses)}")
        print(f"{label}PyTorch's own drift ({', '.join(args.spread)}): relative loss difference up to {drift:.3e}")
    steps = [r["step"] for r in log]
    if steps != list(range(len(steps))):
        bad = next(i for i, s in enumerate(steps) if s != i)
        violations.append(f"log steps are not 0, 1, 2, ...: line {bad + 1} has step {steps[bad]}")
    if len(log) < len(ref_losses):
        violations.append(f"log has {len(log)} steps, the reference {len(ref_losses)}: "
                          f"steps {len(log)}..{len(ref_losses) - 1} are missing")
    elif len(log) > len(ref_losses):
        violations.append(f"log has {len(log)} steps, more than the reference's {len(ref_losses)}")
    worst_rel, worst_step = 0.0, None
    for i, (record, want) in enumerate(zip(log, ref_losses)):
        got = record["loss"]
        if not isinstance(got, (int, float)) or not math.isfinite(got) or not math.isfinite(want):
            violations.append(f"step {i}: loss {got!r}, reference {want!r}: not finite")
            continue
        rel = abs(got - want) / max(abs(want), 1e-30)
        if worst_step is None or rel > worst_rel:
            worst_rel, worst_step = rel, i
        if rel > loss_tolerance[i]:
            violations.append(f"step {i}: loss {got:.9g}, reference {want:.9g}: relative error {rel:.3e} "
                              f"> {loss_tolerance[i]:.3g}")
    if worst_step is not None:
        print(f"{label}losses: {min(len(log), len(ref_losses))} steps, max relative error {worst_rel:.3e} "
              f"(step {worst_step}; tolerance there {loss_tolerance[worst_step]:.3g})")
    if "lr" in ref and log and "lr" in log[0]:
        lr = log[0]["lr"]
        if abs(lr - ref["lr"]) > 1e-6 * abs(ref["lr"]):
            violations.append(f"log's lr {lr:.9g} is not the reference's {ref['lr']:.9g}: different settings")

    # --- final weights (and BatchNormalization running statistics, "state"), tensor by tensor
    tensors = dict(ref["weights"])
    tensors.update(ref.get("state", {}))
    for name, tensor in tensors.items():
        want = np.asarray(tensor["data"], dtype=np.float64).reshape(tensor["shape"])
        if name not in saved:
            violations.append(f"weight '{name}': missing from {args.saved}")
            continue
        got = saved[name]
        if got.dtype.kind != "f":
            violations.append(f"weight '{name}': dtype {got.dtype} in {args.saved}, not float")
            continue
        if tuple(got.shape) != tuple(want.shape):
            violations.append(f"weight '{name}': shape {list(got.shape)}, reference {list(want.shape)}")
            continue
        got = got.astype(np.float64)
        if not np.isfinite(got).all():
            violations.append(f"weight '{name}': {int((~np.isfinite(got)).sum())} non-finite values")
            continue
        err = np.abs(got - want)
        where = np.unravel_index(int(np.argmax(err)), err.shape)
        tolerance = args.weight_atol
        line = f"{label}weight {name:<12} {str(list(want.shape)):<18} max abs error {err.max():.3e}"
        if spread is not None:
            own = 0.0
            for path, run in zip(args.spread, spreads):
                other = {**run["weights"], **run.get("state", {})}.get(name)
                if other is None or list(other["shape"]) != list(want.shape):
                    die(f"{path}: no '{name}' of shape {list(want.shape)}")
                own = max(own, float(np.abs(np.asarray(other["data"], dtype=np.float64).reshape(want.shape) - want).max()))
            tolerance = args.weight_atol + args.spread_factor * own
            line += f" (PyTorch's own {own:.3e})"
        if initial is not None and name in initial and initial[name].shape == want.shape:
            change = float(np.abs(want - initial[name].astype(np.float64)).max())
            line += f" (trained change {change:.3e})"
            if change <= tolerance:
                print(f"{PROG}: warning: '{name}' changed by at most {change:.3e} in training, "
                      f"not more than the tolerance {tolerance:.3g}: its check proves little")
        print(line)
        if err.max() > tolerance:
            violations.append(f"weight '{name}': max abs error {err.max():.3e} > {tolerance:.3g} at "
                              f"{list(int(i) for i in where)} (got {got[where]:.9g}, reference {want[where]:.9g})")

    # --- the rest of the saved model: the initial model's initializers, non-trainable unchanged
    if initial is not None:
        if set(saved) != set(initial):
            violations.append(f"saved initializers differ from the initial model's: missing "
                              f"{sorted(set(initial) - set(saved))}, extra {sorted(set(saved) - set(initial))}")
        for name, value in initial.items():
            if name in tensors or name not in saved:
                continue
            if saved[name].shape != value.shape or saved[name].dtype != value.dtype or \
                    saved[name].tobytes() != value.tobytes():
                violations.append(f"initializer '{name}' is not trainable but changed in {args.saved}")

    if violations:
        # Everything but the per-step losses in full, then the first 20 of those.
        per_step = [v for v in violations if v.startswith("step ")]
        other = [v for v in violations if not v.startswith("step ")]
        print(f"{PROG}: {label}FAIL: {len(violations)} violation(s) ({len(per_step)} of the "
              f"{len(ref_losses)} step losses):", file=sys.stderr)
        for v in other + per_step[:20]:
            print(f"  {v}", file=sys.stderr)
        if len(per_step) > 20:
            print(f"  ... and {len(per_step) - 20} more step losses", file=sys.stderr)
        sys.exit(1)
    how = f" (+ {args.spread_factor:g} x PyTorch's own drift)" if spread is not None else ""
    print(f"{label}PASS: {len(ref_losses)} losses within {args.loss_rtol:g} relative, "
          f"{len(tensors)} tensors within {args.weight_atol:g} absolute{how}")


if __name__ == "__main__":
    main()
