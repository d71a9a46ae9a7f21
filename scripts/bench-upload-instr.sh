#!/usr/bin/env bash
# Benchmark (not a test): user-space instructions per MB a Sluice server spends receiving an
# upload, HTTP/2 against HTTP/1.1, counted by callgrind. CPU seconds per GB
# (`scripts/bench-h3.sh --upload`) move by ±10 % between sets on a shared machine; instruction
# counts do not. They leave out the kernel's share (the same system calls for both protocols,
# as strace shows: one `recvfrom` per 16 KiB TLS record either way).
#
# For each protocol Sluice runs under `valgrind --tool=callgrind` (every thread, and the image
# it re-executes itself as at start) twice, once
# for an upload of B0 bytes and once for B0 + B, each one `sluice put -X POST --data @FILE` to
# the speed test's `/__up` over TLS from outside valgrind. Start-up, the handshake and shutdown
# are the same in both runs, so
#   instructions per MB = (Ir(B0 + B) - Ir(B0)) / (B / 10^6)
#
# With --download the same for sending: each run is one `sluice get -o /dev/null` of the speed
# test's `/__down?bytes=N` (generated zeros, no disk) instead of an upload.
#
# Usage: scripts/bench-upload-instr.sh [--download] [--bytes B] [--repeat R] [--no-build] [--keep]
#   --download    count a download instead of an upload
#   --protos L    protocols, comma-separated, from http1.1, http2, http3 (default http1.1,http2;
#                 HTTP/3 runs with [quic] enabled; under callgrind the slowed server may drop
#                 datagrams, and the retransmissions count too)
#   --bytes B     bytes counted (default 200000000; B0 = 20000000)
#   --repeat R    measure each protocol R times (default 1); the table gives the median and range
#   --no-build    use target/release/sluice as it is (default: cargo build --release -p sluice)
#   --keep        keep the temp dir (configs, logs, callgrind outputs)
# Env: SLUICE_BIN (another sluice binary, as server and as client).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$REPO/scripts/bench/lib.sh"
B=200000000
B0=20000000
REPEAT=1
BUILD=1
KEEP=0
DOWNLOAD=0
PROTOS=http1.1,http2

log() { printf 'bench-upload-instr: %s\n' "$*" >&2; }
die() { printf 'bench-upload-instr: ERROR: %s\n' "$*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --bytes) B=${2:?--bytes needs a number}; shift 2 ;;
    --repeat) REPEAT=${2:?--repeat needs a number}; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --keep) KEEP=1; shift ;;
    --download) DOWNLOAD=1; shift ;;
    --protos) PROTOS=${2:?--protos needs a list}; shift 2 ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
[[ "$B" =~ ^[1-9][0-9]*$ ]] || die "--bytes must be a positive integer"
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || die "--repeat must be a positive integer"
IFS=, read -r -a PROTO_LIST <<<"$PROTOS"
for proto in "${PROTO_LIST[@]}"; do
  case "$proto" in
    http1.1 | http2 | http3) ;;
    *) die "unknown protocol in --protos: $proto (http1.1, http2, http3)" ;;
  esac
done
command -v valgrind >/dev/null 2>&1 || die "valgrind not found (run scripts/setup.sh)"

SLUICE=${SLUICE_BIN:-$REPO/target/release/sluice}
if [ -z "${SLUICE_BIN:-}" ] && [ "$BUILD" -eq 1 ]; then
  log "building sluice (cargo build --release -p sluice)"
  (cd "$REPO" && cargo build --release -p sluice) >&2 || die "cargo build failed"
fi
[ -x "$SLUICE" ] || die "$SLUICE not found (build it, or set SLUICE_BIN)"
require_shipped_build "$SLUICE"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/sluice-upload-instr.XXXXXX")
SERVER_PID=""
stop_server() {
  [ -n "$SERVER_PID" ] || return 0
  stop_pid "$SERVER_PID"
  SERVER_PID=""
}
cleanup() {
  stop_server
  if [ "$KEEP" = 1 ]; then log "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

# The bodies: zeros (AES-GCM costs the same whatever the bytes), made once.
head -c "$B0" /dev/zero >"$TMP/small.bin"
head -c "$((B0 + B))" /dev/zero >"$TMP/large.bin"

# count PROTO FILE OUTDIR: Ir of one whole server run that received one upload of FILE.
count() {
  local proto=$1 file=$2 out=$3 port logf
  port=$(free_port)
  mkdir -p "$out"
  logf=$out/server.log
  local quic=false
  [ "$proto" = http3 ] && quic=true
  cat >"$out/sluice.toml" <<EOF
data_dir = '$out/data'
access_log = false
[[listener]]
addr = "127.0.0.1:$port"
tls = true
[quic]
enabled = $quic
EOF
  # --trace-children: on glibc Sluice runs itself again at start with its malloc tunables set
  # (crates/sys/src/tunables.rs); without it the server proper would run outside valgrind.
  valgrind --tool=callgrind --trace-children=yes "--callgrind-out-file=$out/callgrind.out.%p" \
    "$SLUICE" serve --config "$out/sluice.toml" >"$logf" 2>&1 &
  SERVER_PID=$!
  local up=0
  for _ in $(seq 1200); do
    if grep -q "listening on" "$logf" 2>/dev/null; then up=1; break; fi
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  if [ "$up" != 1 ]; then
    tail -n 20 "$logf" >&2 || true
    stop_server
    die "sluice did not start under valgrind"
  fi
  local res size
  size=$(stat -c %s "$file")
  if [ "$DOWNLOAD" = 1 ]; then
    res=$(timeout 900 "$SLUICE" get "--$proto" -k -s -o /dev/null "https://127.0.0.1:$port/__down?bytes=$size") ||
      { stop_server; die "$proto download failed: $res"; }
    grep -q "http_code=200" <<<"$res" || { stop_server; die "$proto download not answered 200: $res"; }
    grep -q "size_download=$size " <<<"$res" || { stop_server; die "$proto download short: $res"; }
  else
    res=$(timeout 900 "$SLUICE" put "--$proto" -k -s -X POST --data "@$file" "https://127.0.0.1:$port/__up") ||
      { stop_server; die "$proto upload failed: $res"; }
    grep -q "http_code=200" <<<"$res" || { stop_server; die "$proto upload not answered 200: $res"; }
    grep -q "size_upload=$size " <<<"$res" || { stop_server; die "$proto upload short: $res"; }
  fi
  stop_server
  callgrind_total "$out"
}

declare -A PER_MB
for proto in "${PROTO_LIST[@]}"; do
  for r in $(seq "$REPEAT"); do
    log "$proto run $r: $B0 bytes under callgrind"
    small=$(count "$proto" "$TMP/small.bin" "$TMP/$proto-small-$r")
    log "$proto run $r: $((B0 + B)) bytes under callgrind"
    large=$(count "$proto" "$TMP/large.bin" "$TMP/$proto-large-$r")
    per=$(awk -v a="$small" -v b="$large" -v n="$B" 'BEGIN { printf "%.0f", (b - a) / (n / 1e6) }')
    log "$proto run $r: Ir $small and $large: $per per MB"
    PER_MB[$proto]="${PER_MB[$proto]:-} $per"
  done
done

if [ "$DOWNLOAD" = 1 ]; then
  printf '\nSluice sending one download over TLS to `sluice get` (loopback), user-space instructions per MB\n'
else
  printf '\nSluice receiving one upload over TLS from `sluice put` (loopback), user-space instructions per MB\n'
fi
printf '(callgrind, (Ir(%d B) - Ir(%d B)) / %d MB; %d run(s) each)\n\n' "$((B0 + B))" "$B0" "$((B / 1000000))" "$REPEAT"
printf '| protocol | instructions per MB, median | range |\n|---|---|---|\n'
ARGS=()
for proto in "${PROTO_LIST[@]}"; do ARGS+=("$proto" "${PER_MB[$proto]}"); done
python3 - "${ARGS[@]}" <<'EOF'
import statistics, sys
names = {"http1.1": "HTTP/1.1", "http2": "HTTP/2", "http3": "HTTP/3"}
runs = {sys.argv[i]: [int(x) for x in sys.argv[i + 1].split()] for i in range(1, len(sys.argv), 2)}
for proto, v in runs.items():
    print(f"| {names[proto]} | {statistics.median(v):,.0f} | {min(v):,}–{max(v):,} |")
base = runs.get("http1.1")
for proto, v in runs.items():
    if base and proto != "http1.1":
        print(f"\n{names[proto]} / HTTP/1.1 (medians): {statistics.median(v) / statistics.median(base):.3f}")
if "http2" in runs and "http3" in runs:
    print(f"\nHTTP/3 / HTTP/2 (medians): {statistics.median(runs['http3']) / statistics.median(runs['http2']):.3f}")
EOF
