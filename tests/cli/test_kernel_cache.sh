#!/usr/bin/env bash
# The kernel cache across processes: two trainers filling one empty cache at once both
# finish; later runs load every kernel and train the same bits; --no-cache, a missing
# linker and damaged entries change nothing in the results; `compile --train` stores
# its static libraries in the entries the trainer's shared objects are in.
set -u
convgen="$1"
# shellcheck source=helpers.sh
source "$(dirname "${BASH_SOURCE[0]}")/helpers.sh"
root="$2"
model="$root/models/lenet.onnx"
cache="$work/cache"
train() {  # train OUT.onnx [options...]: two steps of LeNet on synthetic data
  local out="$1"; shift
  "$convgen" train "$model" --data synthetic --synthetic-count 32 --steps 2 --batch 16 --threads 1 \
    --target x86-64-linux-avx-avx2-f16c-fma-sse41 --save "$out" --verbose "$@"
}

# Two processes, one empty cache, at once.
train "$work/a.onnx" --cache-dir "$cache" >/dev/null 2>"$work/a.log" &
first=$!
train "$work/b.onnx" --cache-dir "$cache" >/dev/null 2>"$work/b.log" || fail "the second concurrent trainer failed: $(tail -3 "$work/b.log")"
wait "$first" || fail "the first concurrent trainer failed: $(tail -3 "$work/a.log")"
cmp -s "$work/a.onnx" "$work/b.onnx" || fail "concurrent trainers sharing the cache trained different weights"
# (Each builds what it does not find; one may load some of what the other stored first.)
grep -q "kernel cache $cache: [0-9]* kernels loaded, [1-9][0-9]* built" "$work/a.log" "$work/b.log" ||
  fail "no trainer says it built kernels: $(grep 'kernel cache' "$work/a.log" "$work/b.log")"
[[ -z "$(find "$cache/tmp" -type f 2>/dev/null)" ]] || fail "scratch files left in the cache: $(find "$cache/tmp" -type f)"

# A third run loads everything and trains the same bits.
train "$work/c.onnx" --cache-dir "$cache" >/dev/null 2>"$work/c.log" || fail "a run from the cache failed"
grep -q "kernel cache $cache: [1-9][0-9]* kernels loaded, 0 built" "$work/c.log" ||
  fail "the third run did not load every kernel: $(grep 'kernel cache' "$work/c.log")"
cmp -s "$work/a.onnx" "$work/c.onnx" || fail "loaded kernels trained different weights"

# Off: JIT in-process, the same bits; nothing is stored.
train "$work/d.onnx" --no-cache >/dev/null 2>"$work/d.log" || fail "--no-cache run failed"
grep -q "kernel cache off" "$work/d.log" || fail "--no-cache is not said: $(grep 'kernel cache' "$work/d.log")"
cmp -s "$work/a.onnx" "$work/d.onnx" || fail "JIT kernels trained different weights than cached ones"
CONVGEN_CACHE=off train "$work/d2.onnx" --verbose >/dev/null 2>"$work/d2.log" || fail "CONVGEN_CACHE=off run failed"
grep -q "kernel cache off" "$work/d2.log" || fail "CONVGEN_CACHE=off is not honoured"

# No linker on this machine: JIT-compiled, said once, the same bits.
CONVGEN_LD=/nonexistent/ld train "$work/e.onnx" --cache-dir "$work/cache2" >/dev/null 2>"$work/e.log" ||
  fail "a run without a linker failed: $(tail -3 "$work/e.log")"
grep -q "JIT-compiled in-process (cannot run the linker '/nonexistent/ld'" "$work/e.log" ||
  fail "the missing linker is not named: $(grep 'kernel cache' "$work/e.log")"
cmp -s "$work/a.onnx" "$work/e.onnx" || fail "the JIT fallback trained different weights"
# Each kernel is counted once: as many JIT-compiled without a linker as with the cache off.
jit_count() { grep -o '[0-9]* JIT-compiled' "$1" | head -1 | cut -d' ' -f1; }
[[ -n "$(jit_count "$work/d.log")" && "$(jit_count "$work/e.log")" == "$(jit_count "$work/d.log")" ]] ||
  fail "JIT counts differ: no linker $(jit_count "$work/e.log"), cache off $(jit_count "$work/d.log")"

# A linker that fails on kernels (not on the runtime): each such kernel is JIT-compiled,
# said, and the cache stays on for the others.
cat >"$work/ld-refusing-kernels" <<'SH'
#!/usr/bin/env bash
for a in "$@"; do [[ "$a" == *runtime.o ]] && exec ld "$@"; done
echo "refusing kernels" >&2
exit 1
SH
chmod +x "$work/ld-refusing-kernels"
CONVGEN_LD="$work/ld-refusing-kernels" train "$work/e2.onnx" --cache-dir "$work/cache3" >/dev/null 2>"$work/e2.log" ||
  fail "a run whose kernels do not link failed: $(tail -3 "$work/e2.log")"
grep -q "0 kernels loaded, 0 built and stored, [1-9][0-9]* JIT-compiled in-process (the linker .* failed (exit 1): refusing kernels)" \
  "$work/e2.log" || fail "per-kernel link failures not said: $(grep 'kernel cache' "$work/e2.log")"
cmp -s "$work/a.onnx" "$work/e2.onnx" || fail "kernels that did not link trained different weights"

# A cache directory another user owns is never loaded from (only testable as root).
if [[ $(id -u) -eq 0 ]]; then
  mkdir -p "$work/foreign"
  chown 65534 "$work/foreign"
  train "$work/e3.onnx" --cache-dir "$work/foreign" >/dev/null 2>"$work/e3.log" || fail "a run with a foreign cache failed"
  grep -q "belongs to another user" "$work/e3.log" || fail "a foreign cache is not refused: $(grep 'kernel cache' "$work/e3.log")"
  cmp -s "$work/a.onnx" "$work/e3.onnx" || fail "the foreign-cache run trained different weights"
fi

# Damaged entries are rebuilt, never run.
for so in $(find "$cache/kernels" -name '*.so'); do echo "garbage" >"$so"; done
train "$work/f.onnx" --cache-dir "$cache" >/dev/null 2>"$work/f.log" || fail "a run over damaged entries failed"
grep -q "damaged entries replaced" "$work/f.log" || fail "damaged entries not replaced: $(grep 'kernel cache' "$work/f.log")"
cmp -s "$work/a.onnx" "$work/f.onnx" || fail "rebuilt kernels trained different weights"

# compile --train stores its libraries in the same entries.
"$convgen" compile "$model" --train --batch 16 --samples 32 --target x86-64-linux-avx-avx2-f16c-fma-sse41 \
  -o "$work/compiled" --cache-dir "$cache" >/dev/null || fail "compile --train"
shared=0
for entry in "$cache"/kernels/*/; do
  if compgen -G "$entry*.a" >/dev/null && compgen -G "$entry*.so" >/dev/null; then shared=$((shared + 1)); fi
done
[[ $shared -gt 0 ]] || fail "no cache entry holds both compile's library and the trainer's shared object"

# convgen cache: what it holds, trim (entries used within the hour stay), clear.
"$convgen" cache --cache-dir "$cache" >"$work/info" || fail "cache info"
grep -q "entries ([1-9][0-9]* shared objects, [1-9][0-9]* static libraries), 1 runtimes" "$work/info" ||
  fail "cache info: $(cat "$work/info")"
CONVGEN_CACHE_MAX_SIZE=1 "$convgen" cache trim --cache-dir "$cache" | grep -q "removed 0.0 MB" ||
  fail "trim removed entries used within the hour"
"$convgen" cache clear --cache-dir "$cache" >/dev/null || fail "cache clear"
"$convgen" cache info --cache-dir "$cache" | grep -q ": 0 entries (0 shared objects, 0 static libraries), 0 runtimes" ||
  fail "clear left entries: $("$convgen" cache info --cache-dir "$cache")"
train "$work/g.onnx" --cache-dir "$cache" >/dev/null 2>&1 || fail "a run after clear failed"
cmp -s "$work/a.onnx" "$work/g.onnx" || fail "a run after clear trained different weights"
expect_error 2 "unknown action 'bogus'" cache bogus
expect_error 2 "--cache-dir: expected a directory" train "$model" --data synthetic --cache-dir ""
CONVGEN_CACHE_MAX_SIZE=lots expect_error 2 "CONVGEN_CACHE_MAX_SIZE=lots" cache info --cache-dir "$cache"
"$convgen" --help | grep -q "^  cache " || fail "convgen --help does not list cache"

"$convgen" train --help | grep -q -- "--cache-dir DIR" || fail "train --help lacks --cache-dir"
for cmd in run check tune; do
  "$convgen" "$cmd" --help | grep -q -- "--no-cache" || fail "$cmd --help lacks --no-cache"
done

if [[ $failures -eq 0 ]]; then echo "cli.kernel_cache: all checks passed"; else exit 1; fi
