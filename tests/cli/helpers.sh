# Shared by the CLI test scripts (sourced): a work directory removed on exit, a failure
# counter, and expect_error. The sourcing script sets $convgen first.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect_error CODE FRAGMENT ARGS...: convgen ARGS exits with CODE and prints exactly
# one stderr line containing FRAGMENT.
expect_error() {
  local code="$1" fragment="$2"; shift 2
  "$convgen" "$@" >"$work/out" 2>"$work/err"
  local got=$?
  [[ $got -eq $code ]] || fail "convgen $* exited $got, want $code"
  grep -q -- "$fragment" "$work/err" || fail "convgen $*: stderr lacks '$fragment': $(cat "$work/err")"
  [[ $(wc -l <"$work/err") -eq 1 ]] || fail "convgen $*: want one line of error, got: $(cat "$work/err")"
}
