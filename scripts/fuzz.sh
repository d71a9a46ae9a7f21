#!/usr/bin/env bash
# Fuzz Sluice's engines with cargo-fuzz (libFuzzer on nightly Rust); the targets are in fuzz/.
#
#   scripts/fuzz.sh TARGET [SECONDS]   run one target for SECONDS (default 60)
#   scripts/fuzz.sh --smoke [SECONDS]  every target for SECONDS each (default 8), for CI:
#                                      exits non-zero if any of them crashed
#   scripts/fuzz.sh --list             the targets
#   scripts/fuzz.sh --seeds            rewrite the seed corpus (fuzz/corpus/) from
#                                      fuzz/examples/seeds.rs
#
# A run starts from a scratch copy of the target's seed corpus (fuzz/corpus/TARGET), so
# campaigns do not grow the committed corpus. A crash is saved under fuzz/artifacts/TARGET/
# (not committed) and replays with `cd fuzz && cargo +nightly fuzz run -s none TARGET
# artifacts/TARGET/FILE`. Installs what it needs when missing: nightly Rust and cargo-fuzz.
#
# Environment: FUZZ_TARGET_DIR (build directory, default fuzz/target), FUZZ_SANITIZER
# (default none: the engines forbid unsafe code, and without ASan a run does about twice the
# executions; `address` for ASan), FUZZ_RSS_MB (memory limit per run, default 2048: an input
# that makes an engine hold more is a crash, as is one that takes over 10 s).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fuzz="$root/fuzz"
target_dir="${FUZZ_TARGET_DIR:-$fuzz/target}"
sanitizer="${FUZZ_SANITIZER:-none}"
rss_mb="${FUZZ_RSS_MB:-2048}"

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
    exit 2
}

ensure_tools() {
    if ! cargo +nightly --version >/dev/null 2>&1; then
        echo "fuzz: installing the nightly toolchain" >&2
        rustup toolchain install nightly --profile minimal
    fi
    if ! cargo fuzz --version >/dev/null 2>&1; then
        echo "fuzz: installing cargo-fuzz" >&2
        cargo install cargo-fuzz --locked
    fi
}

targets() {
    sed -n 's/^name = "\([a-z0-9_]*\)"$/\1/p' "$fuzz/Cargo.toml" | grep -v '^sluice-fuzz$' || true
}

build() {
    # One build of every target, so that the runs that follow start at once.
    (cd "$fuzz" && cargo +nightly fuzz build --sanitizer "$sanitizer" --target-dir "$target_dir" "$@")
}

# run TARGET SECONDS: returns libFuzzer's status (0: no crash within the time).
run() {
    local target="$1" seconds="$2" scratch status=0
    scratch="$(mktemp -d "${TMPDIR:-/tmp}/sluice-fuzz-$target.XXXXXX")"
    if [ -d "$fuzz/corpus/$target" ]; then
        cp -R "$fuzz/corpus/$target/." "$scratch/"
    fi
    (cd "$fuzz" && cargo +nightly fuzz run --sanitizer "$sanitizer" --target-dir "$target_dir" "$target" "$scratch" -- \
        -max_total_time="$seconds" -rss_limit_mb="$rss_mb" -timeout=10 -print_final_stats=1) || status=$?
    rm -rf "$scratch"
    return "$status"
}

case "${1:-}" in
    --list)
        targets
        ;;
    --seeds)
        (cd "$fuzz" && CARGO_TARGET_DIR="$target_dir/seeds" cargo run --quiet --example seeds)
        ;;
    --smoke)
        seconds="${2:-8}"
        ensure_tools
        build
        failed=()
        for t in $(targets); do
            echo "fuzz: $t for ${seconds}s" >&2
            run "$t" "$seconds" || failed+=("$t")
        done
        if [ "${#failed[@]}" -gt 0 ]; then
            echo "fuzz: crashes in: ${failed[*]} (inputs under fuzz/artifacts/)" >&2
            exit 1
        fi
        echo "fuzz: every target ran ${seconds}s without a crash" >&2
        ;;
    "" | -h | --help)
        usage
        ;;
    -*)
        usage
        ;;
    *)
        target="$1"
        seconds="${2:-60}"
        if ! targets | grep -qx "$target"; then
            echo "fuzz: no target '$target'; targets: $(targets | tr '\n' ' ')" >&2
            exit 2
        fi
        ensure_tools
        build "$target"
        run "$target" "$seconds"
        ;;
esac
