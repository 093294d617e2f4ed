#!/usr/bin/env bash
# convgen-bench end to end on one small layer (no timing is judged): every pass runs for
# every peer and the peers agree; the peers' ISA follows convgen's target; usage errors
# exit 2 with a message; a records file from `convgen tune` adds the tuned peer.
#   tests/bench/test_bench_smoke.sh CONVGEN_BENCH CONVGEN
set -u
bench="$1"
convgen="$2"
py=/usr/bin/python3  # Debian's python3 (reads the JSON)
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "bench.smoke: $*"; exit 1; }
layer='mb2ic8ih9iw7oc16kh3kw3sh2pt1pb0pl1pr1g2n"smoke"'  # strided, grouped, asymmetric padding

# check_json FILE ONEDNN_ISA LANES BLIS_MUST_NOT_BE
check_json() {
  "$py" - "$@" <<'PY' || exit 1
import json, sys
path, isa, lanes, bad_blis = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
doc = json.load(open(path))
b, m = doc["build"], doc["machine"]
def need(ok, what):
    if not ok:
        print(f"bench.smoke: {path}: {what}"); sys.exit(1)
need(b["onednn_isa"] == isa, f"oneDNN ISA {b['onednn_isa']}, expected {isa}")
need(m["fma_probe_lanes"] == lanes, f"probe lanes {m['fma_probe_lanes']}, expected {lanes}")
need(b["blis_arch"] != bad_blis, f"BLIS kernels {b['blis_arch']}")
need(m["fma_peak_gflops_mean"] > 0, "no FMA peak")
passes = sorted(l["pass"] for l in doc["layers"])
need(passes == ["bwd_data", "bwd_weights", "fwd"], f"passes {passes}")
for l in doc["layers"]:
    for peer in ("convgen", "blis", "onednn"):
        need(l[peer] is not None and l[peer]["gflops_median"] > 0, f"{l['pass']}: {peer} did not run")
    need(l["check_ok"] is True, f"{l['pass']}: peers disagree ({l['max_rel_diff']})")
PY
}

unset BLIS_ARCH_TYPE
"$bench" --descriptor "$layer" --pass all --runs 1 --json "$dir/avx2.json" >"$dir/out" 2>&1 ||
  { cat "$dir/out"; fail "default run failed"; }
grep -q "peers matched: oneDNN ISA avx2" "$dir/out" || { cat "$dir/out"; fail "no matched-ISA line"; }
check_json "$dir/avx2.json" avx2 8 generic

if grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo &&
   grep -qw avx512dq /proc/cpuinfo && grep -qw avx512cd /proc/cpuinfo; then
  "$bench" --descriptor "$layer" --pass all --runs 1 --target host --json "$dir/host.json" >"$dir/out" 2>&1 ||
    { cat "$dir/out"; fail "--target host run failed"; }
  check_json "$dir/host.json" avx512_core 16 generic
else
  echo "bench.smoke: no AVX-512: the host-target run is left out"
fi

# A BLIS_ARCH_TYPE of the user's is left alone and said so (3 = haswell in BLIS 0.9).
BLIS_ARCH_TYPE=3 "$bench" --descriptor "$layer" --pass fwd --runs 1 --peers convgen,blis >"$dir/out" 2>&1 ||
  { cat "$dir/out"; fail "run with BLIS_ARCH_TYPE failed"; }
grep -q "(BLIS_ARCH_TYPE from the environment)" "$dir/out" || { cat "$dir/out"; fail "user's BLIS_ARCH_TYPE"; }
BLIS_ARCH_TYPE=3 "$bench" --version >"$dir/out" 2>&1 && grep -q "^BLIS .* (haswell)" "$dir/out" ||
  { cat "$dir/out"; fail "--version with BLIS_ARCH_TYPE"; }
"$bench" --descriptor "$layer" --pass fwd --runs 1 --peers convgen,blis --peer-isa native >"$dir/out" 2>&1 ||
  { cat "$dir/out"; fail "--peer-isa native failed"; }
grep -q "peers native: oneDNN ISA native" "$dir/out" || { cat "$dir/out"; fail "native line"; }

usage() {  # usage EXPECTED_TEXT ARGS...
  local want="$1"; shift
  "$bench" "$@" >"$dir/out" 2>&1
  local rc=$?
  [ $rc -eq 2 ] || { cat "$dir/out"; fail "'$*' exited $rc, expected 2"; }
  grep -q -- "$want" "$dir/out" || { cat "$dir/out"; fail "'$*' did not say '$want'"; }
}
usage "--peer-isa: 'fast' is neither matched nor native" --descriptor "$layer" --peer-isa fast
usage "--target needs a value" --descriptor "$layer" --target
"$bench" --descriptor "$layer" --target arm-64-linux >"$dir/out" 2>&1
rc=$?
[ $rc -eq 7 ] && grep -q "only x86-64 targets are supported" "$dir/out" ||
  { cat "$dir/out"; fail "--target arm-64-linux exited $rc"; }
# --schedules: the tuned records of the layer (at the bench's mb 8) run as the peer
# "tuned", beside the default, checked like the others.
"$convgen" tune "$layer" --batch 8 --target host --records "$dir/r.jsonl" --trials 3 >"$dir/out" 2>&1 ||
  { cat "$dir/out"; fail "convgen tune failed"; }
"$bench" --descriptor "$layer" --pass all --runs 1 --target host --schedules "$dir/r.jsonl" --json "$dir/tuned.json" \
  >"$dir/out" 2>&1 || { cat "$dir/out"; fail "--schedules run failed"; }
grep -q "tn/dn" "$dir/out" || { cat "$dir/out"; fail "no tuned columns"; }
"$py" - "$dir/tuned.json" <<'PY' || exit 1
import json, sys
doc = json.load(open(sys.argv[1]))
for l in doc["layers"]:
    t = l["tuned"]
    if t is None or not t.get("gflops_median", 0) > 0 or not t.get("schedule"):
        print(f"bench.smoke: {l['pass']}: the tuned peer did not run: {t}"); sys.exit(1)
    if l["check_ok"] is not True or l["tuned_vs_onednn"] is None:
        print(f"bench.smoke: {l['pass']}: tuned peer unchecked or unrated"); sys.exit(1)
    # The noise control: the default once more (a private copy), same schedule, checked,
    # and the verdict recomputed from the samples (docs: bench/README.md, "tuned").
    a, c = l["default_again"], l["convgen"]
    if a is None or not a.get("gflops_median", 0) > 0 or a.get("schedule") != c["schedule"]:
        print(f"bench.smoke: {l['pass']}: the default's control did not run as the default: {a}"); sys.exit(1)
    if not "max_rel_diff_vs_" + l["check_ref"] in a and l["check_ref"] != "default_again":
        print(f"bench.smoke: {l['pass']}: the control was not cross-checked: {a}"); sys.exit(1)
    def spread(p):
        g = sorted(p["gflops_all"], reverse=True)
        return (g[0] - g[min(2, len(g) - 1)]) / g[0]
    better = max(c["gflops_median"], a["gflops_median"])
    noise = max(abs(c["gflops_median"] - a["gflops_median"]) / better, spread(c), spread(a), spread(t), 0.01)
    below = (better - t["gflops_median"]) / better > noise
    if abs(l["default_noise"] - noise) > 1e-9 or l["tuned_below_default"] != below:
        print(f"bench.smoke: {l['pass']}: noise {l['default_noise']} / verdict {l['tuned_below_default']}, "
              f"expected {noise} / {below}"); sys.exit(1)
for s in doc["summary"]:
    if s.get("tuned_vs_onednn") is None:
        print(f"bench.smoke: summary without tuned_vs_onednn: {s}"); sys.exit(1)
    below = sum(l["tuned_below_default"] for l in doc["layers"] if l["pass"] == s["pass"])
    if s["tuned_compared"] != 1 or s["tuned_below_default"] != below:
        print(f"bench.smoke: summary counts {s['tuned_compared']} / {s['tuned_below_default']}, expected 1 / {below}")
        sys.exit(1)
PY
# Weights: by default (and with --weights prepacked) every convgen peer (default, tuned,
# control) reads GEMM weights packed once at set-up (the JSON counts the floats it
# packed); with --weights per_call none does; bwd_weights reads none either way. A GEMM
# layer in every pass (the smoke layer's groups take other strategies on AVX-512).
gemm_layer='mb2ic16ih9iw7oc32kh3kw3sh2pt1pb0pl1pr1'
"$convgen" tune "$gemm_layer" --batch 8 --target host --records "$dir/g.jsonl" --trials 2 >"$dir/out" 2>&1 ||
  { cat "$dir/out"; fail "convgen tune of the GEMM layer failed"; }
for run in "default:" "host:prepacked" "default:per_call"; do
  target=${run%%:*} weights=${run#*:}
  [ "$target" = default ] && target=
  "$bench" --descriptor "$gemm_layer" --pass all --runs 1 ${target:+--target $target} ${weights:+--weights $weights} \
    ${target:+--schedules "$dir/g.jsonl"} --json "$dir/packed.json" >"$dir/out" 2>&1 ||
    { cat "$dir/out"; fail "--weights ${weights:-(default)} ${target:+(host, tuned)} run failed"; }
  want_mode=${weights:-prepacked} want_line="convgen weights prepacked"
  [ "$want_mode" = per_call ] && want_line="convgen weights packed per call"
  grep -q "$want_line" "$dir/out" || { cat "$dir/out"; fail "no weights line for $want_mode"; }
  "$py" - "$dir/packed.json" "${target:-avx2}" "$want_mode" <<'PY' || exit 1
import json, sys
doc, target, mode = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
def need(ok, what):
    if not ok:
        print(f"bench.smoke: --weights {mode} ({target}): {what}"); sys.exit(1)
need(doc["weights"] == mode, f"weights {doc['weights']}")
packed_runs = set()
for l in doc["layers"]:
    for peer in ("convgen", "tuned", "default_again"):
        p = l.get(peer)
        if p is None: continue
        gemm = p["schedule"].startswith("gemm ")
        want = l["pass"] != "bwd_weights" and gemm and mode == "prepacked"
        need(("pack_weights=prepacked" in p["schedule"]) == want, f"{l['pass']} {peer}: {p['schedule']}")
        need((p["packed_weight_floats"] > 0) == want, f"{l['pass']} {peer}: {p['packed_weight_floats']} floats packed")
        if want: packed_runs.add((l["pass"], peer))
    need(l["check_ok"] is True, f"{l['pass']}: peers disagree ({l['max_rel_diff']})")
if mode == "prepacked":
    need(("fwd", "convgen") in packed_runs and ("bwd_data", "convgen") in packed_runs, f"packed runs {packed_runs}")
if target == "host":
    need(("fwd", "tuned") in packed_runs and ("fwd", "default_again") in packed_runs, f"packed runs {packed_runs}")
PY
done
usage "--weights per_call and --schedule pack_weights=prepacked disagree" --descriptor "$layer" --weights per_call \
  --schedule pack_weights=prepacked
usage "--weights: 'once' is neither per_call nor prepacked" --descriptor "$layer" --weights once
usage "--peers tuned needs --schedules" --descriptor "$layer" --peers convgen,tuned
usage "unknown peer 'default_again'" --descriptor "$layer" --peers convgen,default_again
echo "bench.smoke: ok"
