#!/usr/bin/env bash
# The test command: everything CI checks, in one go.
#
#   1. scripts/setup.sh                                  test tools (idempotent, fast when present)
#   2. cargo fmt --all -- --check
#   3. cargo clippy --workspace --all-targets --release -- -D warnings
#   4. cargo build --release -p sluice                   the binary h2spec and the tests run
#   5. cargo test --workspace --release --no-fail-fast   unit + integration tests (curl, nghttp, h2load)
#   6. scripts/h2spec.sh                                 HTTP/2 conformance (TLS, strict, h2c)
#   7. scripts/fuzz.sh --smoke 5                         every fuzz target for 5 s (nightly)
#
# Release everywhere, so one profile is compiled for the tests and for h2spec. Every step runs
# even when an earlier one failed (except h2spec without a binary); a summary follows and the
# exit status is non-zero when any step failed. CI keeps only the tail of this output, so the
# failed tests' names and first lines are repeated just above the summary.
#
# Usage: scripts/test.sh [--no-setup]
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

RUN_SETUP=1
for arg in "$@"; do
  case "$arg" in
    --no-setup) RUN_SETUP=0 ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

export RUST_BACKTRACE=${RUST_BACKTRACE:-1}
# h2spec may live in the Go bin directory when setup could not link it onto PATH.
if command -v go >/dev/null 2>&1; then
  PATH="$PATH:$(go env GOPATH 2>/dev/null | cut -d: -f1)/bin"
fi

declare -a STEP_NAMES=() STEP_STATUS=() STEP_SECS=()
any_failed=0
t_all=$(date +%s)

# step NAME COMMAND...: runs COMMAND, records ok/FAIL and its duration; LAST_RC is its status.
LAST_RC=0
step() {
  local name=$1 t0 rc=0
  shift
  printf '\n==> %s: %s\n' "$name" "$*"
  t0=$(date +%s)
  "$@" || rc=$?
  STEP_NAMES+=("$name")
  STEP_SECS+=($(($(date +%s) - t0)))
  if [ "$rc" -eq 0 ]; then
    STEP_STATUS+=("ok")
  else
    STEP_STATUS+=("FAIL (exit $rc)")
    any_failed=1
    printf '==> %s FAILED (exit %s)\n' "$name" "$rc"
  fi
  LAST_RC=$rc
}
skip() {
  STEP_NAMES+=("$1") STEP_STATUS+=("skipped: $2") STEP_SECS+=(0)
  printf '\n==> %s skipped: %s\n' "$1" "$2"
}

if [ "$RUN_SETUP" -eq 1 ]; then
  step setup bash "$REPO/scripts/setup.sh"
else
  skip setup "--no-setup"
fi
step fmt cargo fmt --all -- --check
step clippy cargo clippy --workspace --all-targets --release -- -D warnings
step build cargo build --release -p sluice
build_rc=$LAST_RC
TEST_LOG=$(mktemp -t sluice-test.XXXXXX)
trap 'rm -f "$TEST_LOG"' EXIT
run_tests() {
  cargo test --workspace --release --no-fail-fast 2>&1 | tee "$TEST_LOG"
  return "${PIPESTATUS[0]}"
}
step test run_tests
test_rc=$LAST_RC
if [ "$build_rc" -eq 0 ]; then
  step h2spec bash "$REPO/scripts/h2spec.sh"
else
  skip h2spec "the release build failed"
fi
step fuzz bash "$REPO/scripts/fuzz.sh" --smoke 5

# The failures of the test step, in short: cargo's list of failed targets, each failed test's
# name and the first lines of what it printed (its panic message among them).
if [ "$test_rc" -ne 0 ] && [ -s "$TEST_LOG" ] && grep -qE '^test .* \.\.\. FAILED$|^error(\[E[0-9]+\])?: ' "$TEST_LOG"; then
  echo
  echo "Test failures (the full output is above):"
  {
    grep -E '^test .* \.\.\. FAILED$' "$TEST_LOG"
    awk '/^---- .* stdout ----$/ { n = 10 } n > 0 { print; n-- }' "$TEST_LOG"
    awk '/^error(\[E[0-9]+\])?: / { n = 12 } n > 0 { print; n-- }' "$TEST_LOG"
  } | cut -c1-300 | head -n 80
fi

echo
echo "Summary ($(($(date +%s) - t_all))s total):"
for i in "${!STEP_NAMES[@]}"; do
  printf '  %-7s %5ss  %s\n' "${STEP_NAMES[$i]}" "${STEP_SECS[$i]}" "${STEP_STATUS[$i]}"
done
if [ "$any_failed" -ne 0 ]; then
  echo "RESULT: FAILED"
  exit 1
fi
echo "RESULT: all passed"
