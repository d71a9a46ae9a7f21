#!/usr/bin/env bash
# Soak (not a test, not CI): mixed HTTP/1.1, HTTP/2 and HTTP/3 load with abusive clients mixed
# in, against one Sluice on loopback, with its resident memory sampled every second.
#
# For DURATION seconds (default 600), at the same time:
#   - h2load, TLS h2: small files and 300 KB files, rounds of 60 s (-c 50 -m 10)
#   - h2load --h1, TLS HTTP/1.1 keep-alive: small files (-c 50)
#   - sluice get --http3 (own QUIC client): 1 MB speed-test downloads, one after another
#   - sluice put: 10 MB uploads over h2, one after another
#   - abusers, each wave bounded: clients that stop reading a 1 GB download (h1 and h2c),
#     slow POST bodies (curl --limit-rate 100: below limits.min_rate), requests with 4,000
#     spellings of one path (cache-key abuse) and 60 KB paths (log abuse)
# Then all load stops and the script waits COOLDOWN seconds (default 30) more.
#
# Writes to OUT (default ./soak-results): rss.csv (seconds, rss_kb, phase), server.log,
# load logs, and rss.svg (a chart of RSS over time). Prints the start, peak and final RSS,
# request counts and errors. Exit status 1 when the final RSS is more than 1.5 x the RSS at
# start (memory not given back), or when the server died.
#
# Usage: scripts/soak.sh [--duration S] [--cooldown S] [--out DIR] [--no-build]
# Needs: h2load, curl (scripts/setup.sh installs them).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DURATION=600
COOLDOWN=30
OUT=$PWD/soak-results
BUILD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION=${2:?}; shift 2 ;;
    --cooldown) COOLDOWN=${2:?}; shift 2 ;;
    --out) OUT=$(realpath -m "${2:?}"); shift 2 ;;
    --no-build) BUILD=0; shift ;;
    -h | --help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "soak.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done
log() { printf 'soak: %s\n' "$*" >&2; }
for t in h2load curl python3; do command -v "$t" >/dev/null || { log "needs $t (scripts/setup.sh)"; exit 2; }; done
[ "$BUILD" -eq 1 ] && (cd "$REPO" && cargo build --release -p sluice >&2)
BIN=${SLUICE_BIN:-$REPO/target/release/sluice}

mkdir -p "$OUT"
rm -f "$OUT"/*.log "$OUT"/rss.csv "$OUT"/rss.svg
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do pkill -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
  [ -n "${SRV:-}" ] && kill "$SRV" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/www"
printf 'Hello, world!\n' > "$WORK/www/small.txt"
head -c 300000 /dev/urandom > "$WORK/www/medium.bin"
head -c 10000000 /dev/urandom > "$WORK/up.bin"
PORT=$((20000 + RANDOM % 20000))
PLAIN=$((PORT + 1))
cat > "$WORK/sluice.toml" <<EOF
data_dir = '$WORK/data'
access_log = true
[[listener]]
addr = "127.0.0.1:$PORT"
tls = true
[[listener]]
addr = "127.0.0.1:$PLAIN"
tls = false
[[site]]
root = '$WORK/www'
[timeouts]
header_secs = 5
idle_secs = 20
EOF
"$BIN" serve --config "$WORK/sluice.toml" > "$OUT/server.log" 2>&1 &
SRV=$!
for _ in $(seq 1 100); do curl -sk -o /dev/null "https://127.0.0.1:$PORT/small.txt" && break; sleep 0.1; done
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$SRV/status" 2>/dev/null || echo 0; }
START_RSS=$(rss)
log "server pid $SRV on :$PORT (TLS) and :$PLAIN, RSS at start ${START_RSS} kB; load for ${DURATION}s"

END=$(( $(date +%s) + DURATION ))
until_end() { while [ "$(date +%s)" -lt "$END" ]; do "$@" || true; done; }
# h2load in rounds of at most 60 s that end at END.
h2load_rounds() {
  while :; do
    left=$((END - $(date +%s)))
    [ "$left" -ge 2 ] || return 0
    h2load -D $((left < 60 ? left : 60)) "$@" || true
  done
}

# Well-behaved load, each loop ends at END.
h2load_rounds -c 50 -m 10 "https://127.0.0.1:$PORT/small.txt" "https://127.0.0.1:$PORT/medium.bin" \
  >> "$OUT/h2load-h2.log" 2>&1 & PIDS+=($!)
h2load_rounds --h1 -c 50 "https://127.0.0.1:$PORT/small.txt" >> "$OUT/h2load-h1.log" 2>&1 & PIDS+=($!)
until_end "$BIN" get --http3 -k "https://127.0.0.1:$PORT/__down?bytes=1000000" >> "$OUT/get-h3.log" 2>&1 & PIDS+=($!)
until_end "$BIN" put -k --http2 --data "@$WORK/up.bin" "https://127.0.0.1:$PORT/__up" >> "$OUT/put-h2.log" 2>&1 & PIDS+=($!)

# Abusers, in waves of bounded size and time.
abuse() {
  while [ "$(date +%s)" -lt "$END" ]; do
    # Clients that stop reading (the server must cut them off within two progress windows).
    for _ in $(seq 1 20); do
      timeout 15 bash -c "exec 3<>/dev/tcp/127.0.0.1/$PLAIN; printf 'GET /__down?bytes=1000000000 HTTP/1.1\r\nHost: localhost\r\n\r\n' >&3; sleep 14" &
    done
    # Slow POST bodies, below limits.min_rate.
    for _ in $(seq 1 10); do
      timeout 20 curl -sk -o /dev/null --limit-rate 100 --data-binary "@$WORK/up.bin" "https://127.0.0.1:$PORT/__up" &
    done
    # Spellings of one path, and 60 KB paths.
    for i in $(seq 1 200); do
      curl -sk -o /dev/null "https://127.0.0.1:$PORT/$(printf './%.0s' $(seq 1 $((i % 50 + 1))))small.txt" || true
    done
    LONG=$(head -c 60000 /dev/zero | tr '\0' 'a')
    for _ in $(seq 1 20); do curl -sk -o /dev/null "https://127.0.0.1:$PORT/$LONG" || true; done
    wait
  done
}
abuse >> "$OUT/abuse.log" 2>&1 & PIDS+=($!)

# Sample RSS every second until the load ends and through the cool-down.
echo "seconds,rss_kb,phase" > "$OUT/rss.csv"
T0=$(date +%s)
PEAK=$START_RSS
while :; do
  now=$(date +%s)
  kill -0 "$SRV" 2>/dev/null || { log "the server died"; exit 1; }
  phase=load
  [ "$now" -ge "$END" ] && phase=cooldown
  [ "$now" -ge $((END + COOLDOWN)) ] && break
  r=$(rss)
  [ "$r" -gt "$PEAK" ] && PEAK=$r
  echo "$((now - T0)),$r,$phase" >> "$OUT/rss.csv"
  if [ "$phase" = cooldown ] && [ -n "${PIDS[*]}" ]; then
    # Each loop and what it runs now (the loops also end by themselves at END).
    for p in "${PIDS[@]}"; do pkill -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
    PIDS=()
  fi
  sleep 1
done
FINAL=$(rss)

python3 - "$OUT/rss.csv" "$OUT/rss.svg" "$DURATION" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
xs = [int(r["seconds"]) for r in rows]; ys = [int(r["rss_kb"]) / 1024 for r in rows]
W, H, L, B = 800, 360, 60, 40
xmax = max(xs) or 1; ymax = max(ys) * 1.1 or 1
px = lambda x: L + x / xmax * (W - L - 20); py = lambda y: H - B - y / ymax * (H - B - 20)
pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys))
load_end = px(int(sys.argv[3]))
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<rect x="{load_end:.1f}" y="20" width="{W - 20 - load_end:.1f}" height="{H - B - 20}" fill="#eef"/>',
       f'<polyline fill="none" stroke="#c33" stroke-width="1.5" points="{pts}"/>',
       f'<line x1="{L}" y1="{H-B}" x2="{W-20}" y2="{H-B}" stroke="black"/><line x1="{L}" y1="20" x2="{L}" y2="{H-B}" stroke="black"/>',
       f'<text x="{W/2}" y="{H-8}" text-anchor="middle">seconds (shaded: load stopped)</text>',
       f'<text x="14" y="{H/2}" transform="rotate(-90 14 {H/2})" text-anchor="middle">RSS (MiB)</text>']
for i in range(5):
    y = ymax * i / 4
    svg.append(f'<text x="{L-6}" y="{py(y)+4:.1f}" text-anchor="end">{y:.0f}</text>')
for i in range(6):
    x = xmax * i / 5
    svg.append(f'<text x="{px(x):.1f}" y="{H-B+16}" text-anchor="middle">{x:.0f}</text>')
svg.append("</svg>")
open(sys.argv[2], "w").write("\n".join(svg))
PY

# Sums of h2load's "N succeeded" / "N failed" over its rounds.
sum() { { grep -hoE "[0-9]+ $1" "$2" || true; } | awk '{s+=$1} END {print s+0}'; }
H2_OK=$(sum succeeded "$OUT/h2load-h2.log")
H2_FAIL=$(sum failed "$OUT/h2load-h2.log")
H1_OK=$(sum succeeded "$OUT/h2load-h1.log")
H1_FAIL=$(sum failed "$OUT/h2load-h1.log")
H3_OK=$(grep -c 'http_code=200' "$OUT/get-h3.log" || true)
H3_BAD=$(grep -vc 'http_code=200' "$OUT/get-h3.log" || true)
PUT_OK=$(grep -c 'http_code=200' "$OUT/put-h2.log" || true)
echo "RSS: start ${START_RSS} kB, peak ${PEAK} kB, ${COOLDOWN}s after the load ${FINAL} kB"
echo "h2 (h2load): ${H2_OK} succeeded, ${H2_FAIL} failed; h1 (h2load --h1): ${H1_OK} succeeded, ${H1_FAIL} failed"
echo "h3 downloads: ${H3_OK} ok, ${H3_BAD} other lines; h2 uploads: ${PUT_OK} ok"
echo "server log: $(grep -c 'WARN\|ERROR' "$OUT/server.log" || true) warnings/errors; results in $OUT"
if [ "$FINAL" -gt $((START_RSS * 3 / 2)) ]; then
  echo "RESULT: RSS did not come back within 1.5 x its start"
  exit 1
fi
echo "RESULT: ok"
