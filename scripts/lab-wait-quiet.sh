#!/usr/bin/env bash
# Waits (up to 20 minutes, polling every 30 s) until no benchmark runs (bench-proxy.sh, h2load),
# so lab measurements and benchmarks do not disturb each other; exit 1 if one still runs then.
for _ in $(seq 1 40); do
  if ! pgrep -f bench-proxy.sh >/dev/null && ! pgrep -x h2load >/dev/null; then
    exit 0
  fi
  sleep 30
done
echo "lab-wait-quiet: a benchmark still runs after 20 minutes" >&2
exit 1
