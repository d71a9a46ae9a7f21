// Sluice browser speed test: /__ping, /__down?bytes=N, POST /__up.
"use strict";

const TARGET_SECONDS = 2;
const START_BYTES = 1e6;
const MAX_DOWN_BYTES = 2e9;
const MAX_UP_BYTES = 256e6;

const $ = (id) => document.getElementById(id);
const bust = () => "r=" + Math.random().toString(36).slice(2);
const mbps = (bytes, ms) => (ms > 0 ? (bytes * 8) / (ms / 1000) / 1e6 : 0);
const fmt = (x) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));
const mb = (b) => (b / 1e6).toFixed(0) + " MB";

function log(line) {
  $("log").textContent += line + "\n";
}

function protocolOf(url) {
  const entries = performance.getEntriesByName(new URL(url, location.href).href);
  const last = entries[entries.length - 1];
  return last && last.nextHopProtocol ? last.nextHopProtocol : "?";
}

async function ping(n = 10) {
  const times = [];
  let url = "";
  for (let i = 0; i < n; i++) {
    url = "/__ping?" + bust();
    const t0 = performance.now();
    const r = await fetch(url, { cache: "no-store" });
    await r.arrayBuffer();
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  const median = times[Math.floor(times.length / 2)];
  $("ping").textContent = median.toFixed(1);
  $("ping-detail").textContent = `min ${times[0].toFixed(1)} ms, max ${times[times.length - 1].toFixed(1)} ms, ${protocolOf(url)}`;
  log(`ping: median ${median.toFixed(1)} ms over ${n} requests`);
}

async function downloadOnce(bytes) {
  const url = `/__down?bytes=${bytes}&${bust()}`;
  const t0 = performance.now();
  const r = await fetch(url, { cache: "no-store" });
  if (!r.ok) throw new Error(`download: HTTP ${r.status}: ${await r.text()}`);
  const reader = r.body.getReader();
  let got = 0;
  let lastShown = t0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    got += value.length;
    const now = performance.now();
    if (now - lastShown > 200) {
      $("down").textContent = fmt(mbps(got, now - t0));
      lastShown = now;
    }
  }
  const ms = performance.now() - t0;
  return { got, ms, proto: protocolOf(url) };
}

async function download() {
  let bytes = START_BYTES;
  for (;;) {
    let result;
    try {
      result = await downloadOnce(bytes);
    } catch (e) {
      // A server with a small max_download_bytes refuses the bigger sizes: keep the last result.
      if (bytes === START_BYTES) throw e;
      log(String(e));
      return;
    }
    const { got, ms, proto } = result;
    const rate = mbps(got, ms);
    $("down").textContent = fmt(rate);
    $("down-detail").textContent = `${mb(got)} in ${(ms / 1000).toFixed(2)} s, ${proto}`;
    log(`download: ${mb(got)} in ${(ms / 1000).toFixed(2)} s = ${fmt(rate)} Mbit/s`);
    if (ms >= TARGET_SECONDS * 1000 || bytes * 4 > MAX_DOWN_BYTES) return;
    bytes *= 4;
  }
}

async function uploadOnce(bytes) {
  const body = new Uint8Array(bytes);
  const url = "/__up?" + bust();
  const t0 = performance.now();
  const r = await fetch(url, { method: "POST", body, cache: "no-store", headers: { "content-type": "application/octet-stream" } });
  if (!r.ok) throw new Error(`upload: HTTP ${r.status}: ${await r.text()}`);
  const server = await r.json();
  const ms = performance.now() - t0;
  return { ms, server, proto: protocolOf(url) };
}

async function upload() {
  let bytes = START_BYTES;
  for (;;) {
    const { ms, server, proto } = await uploadOnce(bytes);
    const rate = mbps(bytes, ms);
    $("up").textContent = fmt(rate);
    $("up-detail").textContent = `${mb(bytes)} in ${(ms / 1000).toFixed(2)} s; server: ${fmt(server.mbps)} Mbit/s, ${proto}`;
    log(`upload: ${mb(bytes)} in ${(ms / 1000).toFixed(2)} s = ${fmt(rate)} Mbit/s (server saw ${server.bytes} bytes in ${server.seconds} s = ${server.mbps} Mbit/s)`);
    if (ms >= TARGET_SECONDS * 1000 || bytes * 4 > MAX_UP_BYTES) return;
    bytes *= 4;
  }
}

async function run() {
  const button = $("start");
  button.disabled = true;
  $("log").textContent = "";
  try {
    $("status").textContent = "measuring latency…";
    await ping();
    $("status").textContent = "measuring download…";
    await download();
    $("status").textContent = "measuring upload…";
    await upload();
    $("status").textContent = "done";
  } catch (e) {
    $("status").textContent = "failed: " + e.message;
    log(String(e));
  } finally {
    button.disabled = false;
  }
}

document.addEventListener("DOMContentLoaded", () => $("start").addEventListener("click", run));
