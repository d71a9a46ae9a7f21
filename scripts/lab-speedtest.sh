#!/usr/bin/env bash
# Lab (not a test): the speed test on emulated links, beside what the link carried. Root only.
#
# Links (sluice-lab link; drop-tail queue 1.5 × BDP, its default):
#   a: 50 Mbit/s both ways, 40 ms RTT;  b: 10 Mbit/s up, 100 Mbit/s down, 20 ms RTT.
# On each, Sluice (the built-in site, [speedtest] on) in the server namespace, and from the
# client namespace: `sluice speedtest --json` (the draft's procedure, HTTP/2), then the page in
# headless Chromium (scripts/speedtest_page.py, real time, DevTools protocol) over HTTP/2,
# HTTP/1.1 (--disable-http2) and HTTP/3 (QUIC forced for the origin). Reported per run: the
# download and upload figures, idle latency, loaded latency (own connection; separate where
# measured), RPM; per link the base RTT and the link's own counters for the whole period (the
# queue as arriving packets found it, p50 and p95 in ms). Screenshots of the page at the end of
# the HTTP/2 run on link a, at 1280 and 390 px, go to docs/img/ with --screenshots.
#
# Usage: scripts/lab-speedtest.sh [--links a,b] [--screenshots]
# Env: SLUICE_BIN, SLUICE_LAB (default target/release/...).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LINKS=a,b
SHOTS=0
while [ $# -gt 0 ]; do
  case "$1" in
    --links) LINKS=$2; shift 2 ;;
    --screenshots) SHOTS=1; shift ;;
    *) echo "usage: $0 [--links a,b] [--screenshots]" >&2; exit 2 ;;
  esac
done
SLUICE_BIN=${SLUICE_BIN:-$ROOT/target/release/sluice}
SLUICE_LAB=${SLUICE_LAB:-$ROOT/target/release/sluice-lab}
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)" >&2; exit 1; }
for b in "$SLUICE_BIN" "$SLUICE_LAB"; do [ -x "$b" ] || { echo "no $b (cargo build --release -p sluice -p sluice-lab)" >&2; exit 1; }; done
TMP=$(mktemp -d /tmp/lab-speedtest.XXXXXX)
LINK_PID=""
SRV_PID=""
cleanup() {
  [ -n "$SRV_PID" ] && kill "$SRV_PID" 2>/dev/null || true
  [ -n "$LINK_PID" ] && kill -INT "$LINK_PID" 2>/dev/null && wait "$LINK_PID" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
S=10.99.0.2
cat > "$TMP/sluice.toml" <<TOML
data_dir = '$TMP/data'
access_log = false
[[listener]]
addr = "$S:8443"
[[listener]]
addr = "$S:8444"
[[site]]
builtin = true
[admin]
addr = "127.0.0.1:0"
TOML

echo "# Speed test on emulated links, $(date -u +%F), $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
echo
echo "| link | client | protocol | download Mbit/s | upload Mbit/s | idle ms | loaded ms (own / separate) down | loaded ms up | RPM |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|"
QUEUES=""
for link in ${LINKS//,/ }; do
  case $link in
    a) args=(--rate 50 --delay 20); name="50/50 Mbit/s × 40 ms" ;;
    b) args=(--rate-up 10 --rate-down 100 --delay 10); name="10↑/100↓ Mbit/s × 20 ms" ;;
    *) echo "unknown link $link" >&2; exit 2 ;;
  esac
  "$SLUICE_LAB" link "${args[@]}" > "$TMP/link-$link.log" 2>&1 &
  LINK_PID=$!
  for _ in $(seq 100); do ip netns exec sluice-lab-c true 2>/dev/null && ip netns exec sluice-lab-s true 2>/dev/null && break; sleep 0.1; done
  sleep 1
  ip netns exec sluice-lab-s "$SLUICE_BIN" serve --config "$TMP/sluice.toml" > "$TMP/sluice-$link.log" 2>&1 &
  SRV_PID=$!
  for _ in $(seq 100); do ip netns exec sluice-lab-c curl -sk -o /dev/null "https://$S:8443/" && break; sleep 0.1; done
  # sluice speedtest
  out=$(ip netns exec sluice-lab-c "$SLUICE_BIN" speedtest "https://$S:8443/" -k --json)
  echo "$out" | python3 -c "import json,sys
r=json.load(sys.stdin); d,u=r['download'],r['upload']
f=lambda x: '%.1f' % x if x is not None else '–'
print('| %s | sluice speedtest | h2 | %s | %s | %s | %s / %s | %s / %s | %s / %s |' % ('$name', f(d['mbps']), f(u['mbps']), f(r['idle_latency_ms']),
  f(d['loaded_latency_ms']['self']), f(d['loaded_latency_ms']['foreign']), f(u['loaded_latency_ms']['self']), f(u['loaded_latency_ms']['foreign']), d['rpm'], u['rpm']))"
  # Chromium takes a self-signed certificate over QUIC only by its key's pin.
  SPKI=$(openssl x509 -in "$TMP/data/self-signed-cert.pem" -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64)
  # The second listener is a second origin: the page's latency on a separate connection.
  PAGE="https://$S:8443/speedtest.html?auto=1&alt=https://$S:8444"
  for proto in h2 h1 h3; do
    extra=("--chrome-arg=--ignore-certificate-errors-spki-list=$SPKI")
    case $proto in
      h1) extra+=(--chrome-arg=--disable-http2) ;;
      h3) extra+=(--chrome-arg=--enable-quic "--chrome-arg=--origin-to-force-quic-on=$S:8443") ;;
    esac
    shot=()
    if [ "$SHOTS" = 1 ] && [ "$link" = a ] && [ "$proto" = h2 ]; then shot=(--screenshot "$ROOT/docs/img/speedtest-desktop.png"); fi
    out=$(ip netns exec sluice-lab-c python3 scripts/speedtest_page.py "$PAGE" "${extra[@]}" "${shot[@]}" || echo '{"results":null}')
    echo "$out" | python3 -c "import json,sys
r=json.load(sys.stdin)['results'] or {}
f=lambda x: '%.1f' % x if isinstance(x,(int,float)) else '–'
d=r.get('download') or {}; u=r.get('upload') or {}; l=r.get('latency') or {}
dl=d.get('loaded_latency_ms') or {}; ul=u.get('loaded_latency_ms') or {}
print('| %s | page, Chromium | %s | %s | %s | %s | %s / %s | %s / %s | %s |' % ('$name', r.get('protocol','failed: '+str(r.get('error'))), f(d.get('mbps_p90')), f(u.get('mbps_p90')), f(l.get('idle_ms')),
  f(dl.get('own_connection')), f(dl.get('separate_connection')), f(ul.get('own_connection')), f(ul.get('separate_connection')), r.get('rpm','–')))"
    if [ "$SHOTS" = 1 ] && [ "$link" = a ] && [ "$proto" = h2 ]; then
      ip netns exec sluice-lab-c python3 scripts/speedtest_page.py "$PAGE" --width 390 --height 844 --screenshot "$ROOT/docs/img/speedtest-phone.png" > /dev/null
    fi
  done
  kill "$SRV_PID"; wait "$SRV_PID" 2>/dev/null || true; SRV_PID=""
  kill -INT "$LINK_PID"; wait "$LINK_PID" 2>/dev/null || true; LINK_PID=""
  QUEUES+="$name: $(grep -A1 -E '^(up|down) *:' "$TMP/link-$link.log" | tail -4 | tr -s ' ' | paste -sd' ' -)"$'\n'
done
echo
echo "The links' own counters over each whole run (all clients; the queue as arriving packets found it):"
echo
echo '```'
printf '%s' "$QUEUES"
echo '```'
