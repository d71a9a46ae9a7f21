#!/usr/bin/env bash
# Granted HTTP/2 receive windows and memory under concurrent uploads, on the lab's emulated link.
# A measurement, not a test: prints figures. Needs root (network namespaces).
#
#   scripts/lab-windows.sh [--rtt MS]... [--budget BYTES]
#
# For each RTT (default 40 and 10 ms) at 200 Mbit/s: three single 10 MB h2 uploads (curl),
# the window each stream was granted (the access log's win=), then 50 concurrent 10 MB uploads
# on one connection and on 50 connections (h2load), with Sluice's peak RSS (VmHWM).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
SLUICE=${SLUICE_BIN:-$REPO/target/release/sluice}
LAB=${SLUICE_LAB_BIN:-$REPO/target/release/sluice-lab}
RTTS=()
BUDGET=1073741824
while [ $# -gt 0 ]; do
  case $1 in
    --rtt) RTTS+=("$2"); shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    *) echo "usage: $0 [--rtt MS]... [--budget BYTES]" >&2; exit 2 ;;
  esac
done
[ ${#RTTS[@]} -gt 0 ] || RTTS=(40 10)
[ "$(id -u)" = 0 ] || { echo "lab-windows: needs root (network namespaces)" >&2; exit 1; }
for b in "$SLUICE" "$LAB"; do [ -x "$b" ] || { echo "lab-windows: $b missing (cargo build --release)" >&2; exit 1; }; done
command -v h2load >/dev/null || { echo "lab-windows: h2load missing (scripts/setup.sh)" >&2; exit 1; }
echo "lab-windows: expected duration about $(( ${#RTTS[@]} * 60 )) s"

WORK=$(mktemp -d /tmp/sluice-labwin-XXXXXX)
LAB_PID=; SRV_PID=
cleanup() {
  [ -n "$SRV_PID" ] && kill "$SRV_PID" 2>/dev/null || true
  [ -n "$LAB_PID" ] && kill "$LAB_PID" 2>/dev/null && wait "$LAB_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
head -c 10000000 /dev/urandom > "$WORK/up.bin"
cat > "$WORK/sluice.toml" <<TOML
data_dir = "$WORK/data"
access_log = true
[[listener]]
addr = "10.99.0.2:8443"
tls = true
[[site]]
builtin = true
[flow]
budget = $BUDGET
[limits]
max_concurrent_streams = 128
TOML

for rtt in "${RTTS[@]}"; do
  delay=$(awk "BEGIN { print $rtt / 2 }")
  "$LAB" link --rate 200 --delay "$delay" --wait 120 > "$WORK/link.log" 2>&1 &
  LAB_PID=$!
  for _ in $(seq 1 100); do ip netns exec sluice-lab-s true 2>/dev/null && ip netns exec sluice-lab-c ip -4 addr 2>/dev/null | grep -q 10.99.0.1 && break; sleep 0.1; done
  ip netns exec sluice-lab-s "$SLUICE" serve --config "$WORK/sluice.toml" > "$WORK/access.log" 2> "$WORK/server.err" &
  SRV_PID=$!
  for _ in $(seq 1 100); do ip netns exec sluice-lab-c curl -sk -o /dev/null https://10.99.0.2:8443/__ping && break; sleep 0.1; done
  bdp=$(( 200000000 / 8 * rtt / 1000 ))
  echo "== 200 Mbit/s x ${rtt} ms RTT (BDP $bdp bytes), budget $BUDGET"
  for i in 1 2 3; do
    ip netns exec sluice-lab-c timeout 60 curl -sk --http2 -H 'Expect:' --data-binary @"$WORK/up.bin" \
      -o /dev/null -w "  single upload $i: %{speed_upload} B/s\n" https://10.99.0.2:8443/__up
  done
  sleep 0.5
  grep -o 'win=[0-9]*' "$WORK/access.log" | tail -3 | while read -r w; do
    n=${w#win=}; echo "  granted window $n bytes = $(awk "BEGIN { printf \"%.2f\", $n / $bdp }") x BDP"
  done
  for spec in "1 50" "50 1"; do
    set -- $spec
    out=$(ip netns exec sluice-lab-c timeout 300 h2load -n 50 -c "$1" -m "$2" -d "$WORK/up.bin" https://10.99.0.2:8443/__up 2>&1 || true)
    echo "  50 uploads, $1 connection(s) x $2 stream(s): $(echo "$out" | grep -E '^requests:' | sed 's/^requests: //'), $(echo "$out" | grep -E '^finished in' | sed 's/,.*req\/s, / /')"
  done
  echo "  sluice peak RSS: $(grep VmHWM /proc/$SRV_PID/status | awk '{print $2, $3}')"
  kill "$SRV_PID"; wait "$SRV_PID" 2>/dev/null || true; SRV_PID=
  kill "$LAB_PID"; wait "$LAB_PID" 2>/dev/null || true; LAB_PID=
done
