#!/usr/bin/env bash
# Installs what Sluice's tests and benchmarks need, idempotently:
#   apt:    curl, openssl, nghttp2-client (nghttp, h2load), h2o, nginx-light, caddy, haproxy (peers),
#           libjs-jquery (the compression benchmark's script),
#           iproute2 (ip netns, for the lab), nodejs (an upstream of the reverse-proxy tests)
#   go:     h2spec, and pebble and pebble-challtestsrv (the ACME test CA and its DNS; Debian's
#           pebble predates ARI) by go install, linked into /usr/local/bin when root
#   rustup: the rustfmt and clippy components
#   pip:    aioquic (HTTP/3 client), grpcio and websockets (reverse-proxy tests),
#           prometheus_client (the metrics test's parser)
# Fast when everything is present: it only checks. `apt-get update` runs only when an apt
# package is missing. Without root, missing tools are reported and skipped; the tests that
# need them print a SKIP note instead of failing. Under CI=true a tool that is still missing at
# the end makes this script fail, so that skipped tests cannot hide a broken setup.
#
# Usage: scripts/setup.sh        (the test command, scripts/test.sh, runs it first)
set -euo pipefail

H2SPEC_MODULE="github.com/summerwind/h2spec/cmd/h2spec@latest"
PEBBLE_VERSION="v2.10.3"

log() { printf 'setup: %s\n' "$*"; }
PROBLEMS=0
warn() {
  printf 'setup: WARNING: %s\n' "$*" >&2
  PROBLEMS=$((PROBLEMS + 1))
}

# Commands that need root: run directly as root, through passwordless sudo otherwise, or not at all.
if [ "$(id -u)" -eq 0 ]; then
  AS_ROOT=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  AS_ROOT=(sudo -n)
else
  AS_ROOT=(none)
fi
can_root() { [ "${AS_ROOT[0]:-}" != none ]; }
as_root() { "${AS_ROOT[@]}" "$@"; }

# --- apt packages -------------------------------------------------------------------------
# package → a command it provides (checked instead of dpkg, so a hand-built tool counts too).
declare -A APT_CMD=(
  [curl]=curl
  [openssl]=openssl
  [nghttp2-client]=h2load
  [h2o]=h2o
  [nginx-light]=nginx
  [caddy]=caddy
  [iproute2]=ip
  [chromium]=chromium
  [ngtcp2-client]=gtlsclient
  [firefox-esr]=firefox-esr
  [libnss3-tools]=certutil
  [nodejs]=node
  [haproxy]=haproxy
  # Not a command: the script scripts/bench-compression.sh compresses.
  [libjs-jquery]=/usr/share/javascript/jquery/jquery.js
)
missing=()
for pkg in curl openssl nghttp2-client h2o nginx-light caddy iproute2 chromium ngtcp2-client firefox-esr \
  libnss3-tools nodejs haproxy libjs-jquery; do
  cmd=${APT_CMD[$pkg]}
  if command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || { [[ $cmd == /* ]] && [ -e "$cmd" ]; }; then
    log "present: $pkg ($cmd)"
  else
    missing+=("$pkg")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    warn "missing ${missing[*]} and no apt-get here; install them by hand (tests that need them skip)"
  elif ! can_root; then
    warn "missing ${missing[*]}; not root and no passwordless sudo, so not installing (tests that need them skip)"
    printf 'setup: install with: sudo apt-get install -y %s\n' "${missing[*]}" >&2
  else
    log "installing: ${missing[*]}"
    # Keep the packages' services (nginx and h2o both want port 80) from starting: a service
    # that fails to start makes dpkg report the package as broken. Only a policy file we
    # created is removed again.
    policy=/usr/sbin/policy-rc.d
    made_policy=0
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\n# created by sluice scripts/setup.sh for the duration of an install\nexit 101\n' \
        | as_root tee "$policy" >/dev/null
      as_root chmod 755 "$policy"
      made_policy=1
      trap 'as_root rm -f "$policy"' EXIT
    fi
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    if [ "$made_policy" -eq 1 ]; then
      as_root rm -f "$policy"
      trap - EXIT
    fi
    log "installed: ${missing[*]}"
  fi
fi

# --- h2spec -------------------------------------------------------------------------------
find_h2spec() {
  if command -v h2spec >/dev/null 2>&1; then
    command -v h2spec
    return 0
  fi
  local gobin=""
  if command -v go >/dev/null 2>&1; then
    gobin=$(go env GOBIN 2>/dev/null || true)
    [ -n "$gobin" ] || gobin="$(go env GOPATH 2>/dev/null | cut -d: -f1)/bin"
  fi
  for p in "$gobin/h2spec" "$HOME/go/bin/h2spec"; do
    if [ -x "$p" ]; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

if h2spec_path=$(find_h2spec); then
  log "present: h2spec ($h2spec_path)"
elif ! command -v go >/dev/null 2>&1; then
  warn "h2spec missing and no Go toolchain to build it; scripts/h2spec.sh will skip"
else
  log "installing: h2spec (go install $H2SPEC_MODULE)"
  if timeout 600 go install "$H2SPEC_MODULE"; then
    h2spec_path=$(find_h2spec) || { warn "go install succeeded but h2spec was not found"; h2spec_path=""; }
    [ -n "$h2spec_path" ] && log "installed: h2spec ($h2spec_path)"
  else
    warn "go install of h2spec failed; scripts/h2spec.sh will skip"
    h2spec_path=""
  fi
fi
# Make it reachable on the default PATH (scripts/h2spec.sh also looks in the Go bin dir).
if [ -n "${h2spec_path:-}" ] && [ "$h2spec_path" != /usr/local/bin/h2spec ] && ! command -v h2spec >/dev/null 2>&1; then
  if can_root; then
    as_root ln -sf "$h2spec_path" /usr/local/bin/h2spec
    log "linked: /usr/local/bin/h2spec -> $h2spec_path"
  else
    log "h2spec is at $h2spec_path (not on PATH; scripts find it there)"
  fi
fi

# --- go: Pebble, the ACME test CA, and its challenge test server (DNS for the test names) ------
gobin_dir=$( (go env GOBIN 2>/dev/null || true) | head -1)
[ -n "$gobin_dir" ] || gobin_dir="$( (go env GOPATH 2>/dev/null || echo "$HOME/go") | head -1)/bin"
for tool in pebble pebble-challtestsrv; do
  # `go install` builds report version "dev": what is there is taken as it is.
  if [ -x "$gobin_dir/$tool" ]; then
    log "present: $tool ($gobin_dir/$tool)"
  elif ! command -v go >/dev/null 2>&1; then
    warn "$tool missing and no Go toolchain to build it; the ACME tests will skip"
    continue
  else
    log "installing: $tool (go install github.com/letsencrypt/pebble/v2/cmd/$tool@$PEBBLE_VERSION)"
    if ! timeout 900 go install "github.com/letsencrypt/pebble/v2/cmd/$tool@$PEBBLE_VERSION"; then
      warn "go install of $tool failed; the ACME tests will skip"
      continue
    fi
  fi
  if [ "$(command -v "$tool" || true)" != "$gobin_dir/$tool" ] && [ "$(command -v "$tool" || true)" != "/usr/local/bin/$tool" ]; then
    if can_root; then
      as_root ln -sf "$gobin_dir/$tool" "/usr/local/bin/$tool"
      log "linked: /usr/local/bin/$tool -> $gobin_dir/$tool"
    else
      log "$tool is at $gobin_dir/$tool (not on PATH)"
    fi
  fi
done

# --- python: aioquic, the HTTP/3 client of scripts/h3client.py --------------------------------
if python3 -c 'import sys, aioquic; sys.exit(not aioquic.__version__.startswith("1."))' 2>/dev/null; then
  log "present: aioquic"
elif ! command -v python3 >/dev/null 2>&1; then
  warn "python3 missing: the HTTP/3 tests with aioquic will skip"
else
  log "installing: aioquic==1.7.2 (pip)"
  # Debian's own python3 refuses pip outside a venv unless told (PEP 668).
  python3 -m pip install -q 'aioquic==1.7.2' 2>/dev/null ||
    python3 -m pip install -q --break-system-packages 'aioquic==1.7.2' ||
    warn "pip install aioquic failed; the HTTP/3 tests with aioquic will skip"
fi

# --- python: grpcio and websockets, real peers of the reverse-proxy tests; prometheus_client,
# the parser the metrics test reads /metrics with --------------------------------------------
for pkg in 'grpcio==1.76.0:grpc' 'websockets==15.0.1:websockets' 'prometheus_client==0.26.0:prometheus_client'; do
  spec=${pkg%%:*}
  module=${pkg##*:}
  if python3 -c "import $module" 2>/dev/null; then
    log "present: $module"
  elif command -v python3 >/dev/null 2>&1; then
    log "installing: $spec (pip)"
    python3 -m pip install -q "$spec" 2>/dev/null ||
      python3 -m pip install -q --break-system-packages "$spec" ||
      warn "pip install $spec failed; the tests that need $module will skip"
  fi
done

# --- rustup components --------------------------------------------------------------------
if command -v rustup >/dev/null 2>&1; then
  installed=$(rustup component list --installed 2>/dev/null || true)
  want=()
  for c in rustfmt clippy; do
    if grep -q "^$c" <<<"$installed"; then
      log "present: rustup component $c"
    else
      want+=("$c")
    fi
  done
  if [ "${#want[@]}" -gt 0 ]; then
    log "installing: rustup components ${want[*]}"
    rustup component add "${want[@]}" || warn "rustup component add ${want[*]} failed"
  fi
else
  for c in rustfmt cargo-clippy; do
    if command -v "$c" >/dev/null 2>&1; then
      log "present: $c"
    else
      warn "$c missing and no rustup to install it"
    fi
  done
fi

if [ "$PROBLEMS" -gt 0 ] && [ "${CI:-}" = true ]; then
  printf 'setup: FAILED: %s problem(s) above; under CI=true every test tool must be present\n' "$PROBLEMS" >&2
  exit 1
fi
if [ "$PROBLEMS" -gt 0 ]; then
  log "done with $PROBLEMS warning(s); tests that need a missing tool will skip"
else
  log "done"
fi
