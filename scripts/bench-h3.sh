#!/usr/bin/env bash
# Benchmark (not a test): HTTP/3 against HTTP/2 from Sluice on loopback, no emulator.
#
# Starts one Sluice (TLS on 127.0.0.1, h3 on the same UDP port) pinned to core 0, and runs
# `sluice get --http2` and `sluice get --http3` of /__down?bytes=N (zeros, generated; no disk)
# pinned to core 1, alternating which protocol goes first run by run. For each download: the
# client's Mbit/s (sluice get's speed_download), the server's CPU seconds (utime + stime from
# /proc/PID/stat, before and after) and the client's (GNU time), each per GB transferred.
# Prints a Markdown table of medians with min–max, and h3/h2 of the median throughputs.
#
# Usage: scripts/bench-h3.sh [--runs N] [--bytes N] [--no-build] [--keep]
#   --runs N      downloads per protocol (default 5)
#   --bytes N     body size (default 1000000000)
#   --small N     instead: N requests for 14 bytes, one after another on one connection
#                 (`sluice get` with N URLs), for the per-request cost: the client's req/s
#                 (one request in flight: a latency figure) and the server's CPU microseconds
#                 per request, whose inverse is what one server core could answer
#   --upload      instead: N-byte uploads (`sluice put -X POST --data @FILE` to /__up, which
#                 discards the body), FILE a file of zeros in the temp dir; the client's Mbit/s is
#                 its speed_upload. For the receive path's CPU per GB
#   --protos LIST comma-separated, from http1.1, http2, http3 (default http2,http3); the ratios
#                 printed are each protocol's against the first
#   --no-build    use target/release/sluice as it is (default: cargo build --release -p sluice)
#   --keep        keep the temp dir (config, logs)
# Env: SLUICE_BIN (another sluice binary); SLUICE_EXTRA_CONFIG (TOML appended to the server's
# configuration, e.g. $'[quic]\ncongestion = "cubic"' to compare a variant).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=5
BYTES=1000000000
BUILD=1
KEEP=0
SMALL=0
UPLOAD=0
PROTOS=http2,http3

log() { printf 'bench-h3: %s\n' "$*" >&2; }
die() { printf 'bench-h3: ERROR: %s\n' "$*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=${2:?--runs needs a number}; shift 2 ;;
    --bytes) BYTES=${2:?--bytes needs a number}; shift 2 ;;
    --small) SMALL=${2:?--small needs a number}; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --keep) KEEP=1; shift ;;
    --upload) UPLOAD=1; shift ;;
    --protos) PROTOS=${2:?--protos needs a list}; shift 2 ;;
    -h | --help) sed -n '2,26p' "$0"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "--runs must be a positive integer, not '$RUNS'"
[[ "$BYTES" =~ ^[1-9][0-9]*$ ]] || die "--bytes must be a positive integer, not '$BYTES'"
IFS=, read -r -a PROTO_LIST <<<"$PROTOS"
for p in "${PROTO_LIST[@]}"; do
  case "$p" in http1.1 | http2 | http3) ;; *) die "--protos: unknown protocol '$p' (http1.1, http2, http3)" ;; esac
done
[ "$UPLOAD" = 1 ] && [ "$SMALL" -gt 0 ] && die "--upload and --small do not go together"
[ -x /usr/bin/time ] || die "/usr/bin/time (GNU time) not found: apt-get install time"

if [ "$BUILD" = 1 ] && [ -z "${SLUICE_BIN:-}" ]; then
  (cd "$REPO" && cargo build --release -p sluice >&2)
fi
SLUICE=${SLUICE_BIN:-$REPO/target/release/sluice}
[ -x "$SLUICE" ] || die "$SLUICE not found (build it, or set SLUICE_BIN)"
# shellcheck source=bench/lib.sh
. "$REPO/scripts/bench/lib.sh"
require_shipped_build "$SLUICE"

PIN_SERVER=() PIN_CLIENT=()
if command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
  PIN_SERVER=(taskset -c 0) PIN_CLIENT=(taskset -c 1)
else
  log "WARNING: fewer than 2 cores or no taskset: server and client are NOT pinned"
fi

WORK=$(mktemp -d /tmp/sluice-bench-h3.XXXXXX)
SERVER_PID=
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  if [ "$KEEP" = 1 ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$WORK/sluice.toml" <<EOF
data_dir = '$WORK/data'
access_log = false
[[listener]]
addr = "127.0.0.1:$PORT"
tls = true
[speedtest]
max_download_bytes = $BYTES
${SLUICE_EXTRA_CONFIG:-}
EOF
"${PIN_SERVER[@]}" "$SLUICE" serve --config "$WORK/sluice.toml" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do
  grep -q "listening on" "$WORK/server.log" && break
  sleep 0.1
done
grep -q "h3 on UDP" "$WORK/server.log" || die "server did not start with HTTP/3: $(cat "$WORK/server.log")"
CLK=$(getconf CLK_TCK)
server_cpu() { awk -v clk="$CLK" '{ printf "%.3f", ($14 + $15) / clk }' "/proc/$SERVER_PID/stat"; }

URL="https://127.0.0.1:$PORT/__down?bytes=$BYTES"
# Each run takes the protocols in turn, starting one further along the list each time.
order() {
  local n=${#PROTO_LIST[@]} i
  for ((i = 0; i < n; i++)); do printf '%s ' "${PROTO_LIST[$(((i + $1 - 1) % n))]}"; done
}
if [ "$UPLOAD" = 1 ]; then
  head -c "$BYTES" /dev/zero >"$WORK/body.bin"
fi
if [ "$SMALL" -gt 0 ]; then
  URLS=()
  for ((i = 0; i < SMALL; i++)); do URLS+=("https://127.0.0.1:$PORT/__down?bytes=14"); done
  echo "proto,run,req_per_s,server_cpu_us_per_req" >"$WORK/small.csv"
  for run in $(seq "$RUNS"); do
    for p in $(order "$run"); do
      before=$(server_cpu)
      t0=$(date +%s.%N)
      out=$(timeout 300 "${PIN_CLIENT[@]}" "$SLUICE" get "--$p" -k -s "${URLS[@]}" 2>&1) || die "$p requests failed: $(tail -2 <<<"$out")"
      t1=$(date +%s.%N)
      after=$(server_cpu)
      ok=$(grep -c "http_version=${p#http} http_code=200 .*connection=1 " <<<"$out" || true)
      [ "$ok" = "$SMALL" ] || die "$p: $ok of $SMALL requests answered 200 on the first connection"
      row=$(awk -v n="$SMALL" -v t0="$t0" -v t1="$t1" -v b0="$before" -v a0="$after" -v p="$p" -v r="$run" \
        'BEGIN { printf "%s,%d,%.0f,%.2f", p, r, n / (t1 - t0), (a0 - b0) * 1e6 / n }')
      echo "$row" >>"$WORK/small.csv"
      log "$row"
    done
  done
else
  echo "proto,run,mbps,server_cpu_s_per_gb,client_cpu_s_per_gb" >"$WORK/results.csv"
  for run in $(seq "$RUNS"); do
    for p in $(order "$run"); do
      before=$(server_cpu)
      if [ "$UPLOAD" = 1 ]; then
        out=$( { /usr/bin/time -f 'cpu %U %S' timeout 300 "${PIN_CLIENT[@]}" "$SLUICE" put "--$p" -k -s -X POST \
          --data "@$WORK/body.bin" "https://127.0.0.1:$PORT/__up"; } 2>&1 ) || die "$p upload failed: $out"
        grep -q "http_code=200" <<<"$out" || die "$p upload not answered 200: $out"
      else
        out=$( { /usr/bin/time -f 'cpu %U %S' timeout 300 "${PIN_CLIENT[@]}" "$SLUICE" get "--$p" -k -s "$URL"; } 2>&1 ) ||
          die "$p download failed: $out"
      fi
      after=$(server_cpu)
      speed=$(sed -n 's/.*speed_\(down\|up\)load=\([0-9]*\).*/\2/p' <<<"$out")
      ccpu=$(awk '/^cpu /{ print $2 + $3 }' <<<"$out")
      [ -n "$speed" ] && [ -n "$ccpu" ] || die "cannot read $p figures from: $out"
      row=$(awk -v s="$speed" -v b="$BYTES" -v b0="$before" -v a0="$after" -v c="$ccpu" -v p="$p" -v r="$run" \
        'BEGIN { gb = b / 1e9; printf "%s,%d,%.1f,%.3f,%.3f", p, r, s * 8 / 1e6, (a0 - b0) / gb, c / gb }')
      echo "$row" >>"$WORK/results.csv"
      log "$row"
      sleep 0.3
    done
  done

fi

if [ "$SMALL" -gt 0 ]; then csv=$WORK/small.csv; else csv=$WORK/results.csv; fi
python3 - "$csv" "$BYTES" "$RUNS" "$SMALL" "$UPLOAD" "$PROTOS" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
small = int(sys.argv[4])
def col(p, k):
    return [float(r[k]) for r in rows if r["proto"] == p]
def cell(v, fmt):
    return f"{fmt.format(statistics.median(v))} ({fmt.format(min(v))}–{fmt.format(max(v))})"
names = {"http1.1": "HTTP/1.1", "http2": "HTTP/2", "http3": "HTTP/3"}
protos = [(p, names[p]) for p in sys.argv[6].split(",")]
upload = sys.argv[5] == "1"
first, base = protos[0]
def ratios(k, invert):
    for p, name in protos[1:]:
        a, b = statistics.median(col(p, k)), statistics.median(col(first, k))
        yield f"{name}/{base} {a and (b / a if invert else a / b):.2f}"
if small:
    print(f"\nLoopback, {small} sequential requests for 14 bytes on one connection, {sys.argv[3]} runs per "
          "protocol, server on core 0, client (sluice get) on core 1; medians (min–max)\n")
    print("| protocol | client req/s (1 in flight) | server CPU µs per request |")
    print("|---|---|---|")
    for p, name in protos:
        print(f"| {name} | {cell(col(p, 'req_per_s'), '{:.0f}')} | {cell(col(p, 'server_cpu_us_per_req'), '{:.1f}')} |")
    print("\nrequests per server CPU second (inverse of the medians): " + ", ".join(ratios("server_cpu_us_per_req", True)))
else:
    what = "uploads to /__up" if upload else "downloads from /__down"
    print(f"\nLoopback, {int(sys.argv[2]) / 1e9:g} GB {what}, {sys.argv[3]} per protocol, "
          "server on core 0, client on core 1; medians (min–max)\n")
    print("| protocol | Mbit/s | server CPU s/GB | client CPU s/GB |")
    print("|---|---|---|---|")
    for p, name in protos:
        print(f"| {name} | {cell(col(p, 'mbps'), '{:.0f}')} | {cell(col(p, 'server_cpu_s_per_gb'), '{:.2f}')} "
              f"| {cell(col(p, 'client_cpu_s_per_gb'), '{:.2f}')} |")
    print("\nmedian throughput: " + ", ".join(ratios("mbps", False)))
    print("median server CPU per GB: " + ", ".join(ratios("server_cpu_s_per_gb", False)))
EOF
