// Sluice browser speed test: idle latency and jitter, downloads and uploads of several sizes
// with the 90th percentile as the headline, latency under load on the loaded connection (and
// on a separate one when a second origin is known), responsiveness (RPM), every measurement's
// protocol, an SVG chart and the results as JSON. Endpoints: /__nq/small, /__down?bytes=N,
// POST /__up. No external requests. `?auto=1` starts at once; `?quick=1` uses small sizes.
"use strict";

const params = new URLSearchParams(location.search);
const QUICK = params.has("quick");
// [bytes, times]; a size runs only while the one before took under SLOW_MS.
const DOWN_SIZES = QUICK ? [[1e5, 3], [1e6, 3]] : [[1e5, 6], [1e6, 6], [1e7, 4], [2.5e7, 3]];
const UP_SIZES = QUICK ? [[1e5, 3], [1e6, 3]] : [[1e5, 6], [1e6, 6], [1e7, 4], [2.5e7, 3]];
const SLOW_MS = 1500;
const IDLE_PINGS = QUICK ? 10 : 20;
const LOADED_EVERY_MS = 200;

const $ = (id) => document.getElementById(id);
const bust = () => "r=" + Math.random().toString(36).slice(2);
const mbps = (bytes, ms) => (ms > 0 ? (bytes * 8) / (ms / 1000) / 1e6 : null);
const fmt = (x) => (x == null ? "–" : x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));
const size = (b) => (b >= 1e6 ? b / 1e6 + " MB" : b / 1e3 + " kB");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function percentile(values, p) {
  const v = values.filter((x) => x != null && isFinite(x)).sort((a, b) => a - b);
  if (!v.length) return null;
  return v[Math.min(v.length - 1, Math.floor(p * (v.length - 1) + 0.5))];
}
const median = (v) => percentile(v, 0.5);
// draft-ietf-ippm-responsiveness §5.3.1: the mean of the best 95 %.
function trimmedMean(values) {
  const v = values.filter((x) => x != null && isFinite(x)).sort((a, b) => a - b);
  if (!v.length) return null;
  const keep = v.slice(0, Math.max(1, Math.ceil(v.length * 0.95)));
  return keep.reduce((a, b) => a + b, 0) / keep.length;
}

// The protocol a request went over. The resource-timing entry exists once the body has been
// read, but may be queued a moment later: look again after a turn of the event loop.
async function protocolOf(url) {
  const full = new URL(url, location.href).href;
  for (let i = 0; i < 5; i++) {
    const e = performance.getEntriesByName(full);
    if (e.length && e[e.length - 1].nextHopProtocol) return e[e.length - 1].nextHopProtocol;
    await sleep(i * 10);
  }
  return "unknown";
}

// A second origin of this server (a separate connection): ?alt=, else the other loopback name.
function altOrigin() {
  if (params.get("alt")) return params.get("alt").replace(/\/$/, "");
  const port = location.port ? ":" + location.port : "";
  if (location.hostname === "localhost") return `${location.protocol}//127.0.0.1${port}`;
  if (location.hostname === "127.0.0.1") return `${location.protocol}//localhost${port}`;
  return null;
}

async function small(origin = "") {
  const url = `${origin}/__nq/small?${bust()}`;
  const t0 = performance.now();
  const r = await fetch(url, { cache: "no-store", mode: origin ? "cors" : "same-origin" });
  await r.arrayBuffer();
  return { ms: performance.now() - t0, url };
}

const results = {
  version: 1,
  started: null,
  server: location.origin,
  user_agent: navigator.userAgent,
  protocol: null,
  latency: null,
  download: null,
  upload: null,
  rpm: null,
  measurements: [],
};

function row(what, bytes, rate, proto) {
  const tr = document.createElement("tr");
  for (const text of [what, size(bytes), fmt(rate), proto]) {
    const td = document.createElement("td");
    td.textContent = text;
    tr.appendChild(td);
  }
  $("rows").appendChild(tr);
}

async function idleLatency() {
  const times = [];
  let url = "";
  for (let i = 0; i < IDLE_PINGS; i++) {
    const r = await small();
    times.push(r.ms);
    url = r.url;
  }
  let jitter = 0;
  for (let i = 1; i < times.length; i++) jitter += Math.abs(times[i] - times[i - 1]);
  jitter /= times.length - 1;
  const proto = await protocolOf(url);
  results.protocol = proto;
  results.latency = { idle_ms: median(times), jitter_ms: jitter, p90_ms: percentile(times, 0.9), samples: times, protocol: proto };
  $("latency").textContent = fmt(results.latency.idle_ms);
  $("latency-detail").textContent = `jitter ${fmt(jitter)} ms, ${proto}`;
}

// Requests for the 1-byte resource every LOADED_EVERY_MS while `work` runs: on this origin
// (the loaded connection over HTTP/2 and HTTP/3) and, when known, on a second one.
async function underLoad(work) {
  const own = [];
  const separate = [];
  const alt = altOrigin();
  let running = true;
  const probe = (async () => {
    while (running) {
      const jobs = [small().then((r) => own.push(r.ms)).catch(() => {})];
      if (alt) jobs.push(small(alt).then((r) => separate.push(r.ms)).catch(() => {}));
      await Promise.all([...jobs, sleep(LOADED_EVERY_MS)]);
    }
  })();
  try {
    await work();
  } finally {
    running = false;
    await probe;
  }
  return { own_ms: own, separate_ms: separate, separate_origin: alt };
}

async function downloadOnce(bytes) {
  const url = `/__down?bytes=${bytes}&${bust()}`;
  const r = await fetch(url, { cache: "no-store" });
  if (!r.ok) throw new Error(`download: HTTP ${r.status}`);
  // From the response head to the last byte: the request's round trip is not transfer time.
  const t0 = performance.now();
  const reader = r.body.getReader();
  let got = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    got += value.length;
  }
  const ms = performance.now() - t0;
  return { bytes: got, ms, mbps: mbps(got, ms), protocol: await protocolOf(url) };
}

async function uploadOnce(bytes, body) {
  const url = "/__up?" + bust();
  const t0 = performance.now();
  const r = await fetch(url, { method: "POST", body, cache: "no-store", headers: { "content-type": "application/octet-stream" } });
  if (!r.ok) throw new Error(`upload: HTTP ${r.status}`);
  const server = await r.json();
  const ms = performance.now() - t0;
  // The server's timing (request head to last byte) is the rate the network carried.
  const rate = server.mbps > 0 ? server.mbps : mbps(bytes, ms);
  return { bytes, ms, mbps: rate, browser_mbps: mbps(bytes, ms), server_seconds: server.seconds, protocol: await protocolOf(url) };
}

async function transfers(kind, sizes, once, show) {
  const done = [];
  for (const [bytes, times] of sizes) {
    const body = kind === "upload" ? new Uint8Array(bytes) : null;
    let slowest = 0;
    for (let i = 0; i < times; i++) {
      const m = await once(bytes, body);
      m.kind = kind;
      done.push(m);
      results.measurements.push(m);
      row(kind, m.bytes, m.mbps, m.protocol);
      slowest = Math.max(slowest, m.ms);
      show(done);
    }
    if (slowest > SLOW_MS) break;
  }
  return done;
}

function summary(kind, ms, load) {
  const big = ms.filter((m) => m.bytes >= 1e6);
  const use = big.length ? big : ms;
  const own = trimmedMean(load.own_ms);
  const separate = trimmedMean(load.separate_ms);
  return {
    mbps_p90: percentile(use.map((m) => m.mbps), 0.9),
    mbps_median: median(use.map((m) => m.mbps)),
    measurements: ms.length,
    loaded_latency_ms: { own_connection: own, separate_connection: separate, samples_own: load.own_ms.length, samples_separate: load.separate_ms.length, separate_origin: load.separate_origin },
    rpm_own: own ? 60000 / own : null,
    rpm_separate: separate ? 60000 / separate : null,
  };
}

function showRpm() {
  const legs = [results.download, results.upload].filter(Boolean);
  const rpms = legs.flatMap((l) => [l.rpm_own, l.rpm_separate]).filter((x) => x != null);
  if (!rpms.length) return;
  results.rpm = Math.round(rpms.reduce((a, b) => a + b, 0) / rpms.length);
  $("rpm").textContent = String(results.rpm);
  const cls = results.rpm < 300 ? "poor" : results.rpm < 1000 ? "fair" : results.rpm < 6000 ? "good" : "excellent";
  const lat = legs.map((l) => `${l === results.download ? "download" : "upload"} ${fmt(l.loaded_latency_ms.own_connection)} ms`).join(", ");
  $("rpm-detail").textContent = `${cls}; loaded latency ${lat}`;
}

// A hand-drawn SVG: transfers as dots (Mbit/s, log scale) with each direction's p90 line,
// and latency (idle and loaded) as bars.
function chart() {
  const W = 640, H = 220, pad = 36;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("role", "img");
  const d = results.download, u = results.upload, l = results.latency;
  svg.setAttribute("aria-label", `Download ${fmt(d && d.mbps_p90)} Mbit/s, upload ${fmt(u && u.mbps_p90)} Mbit/s (90th percentiles); latency idle ${fmt(l && l.idle_ms)} ms`);
  const el = (name, attrs, text) => {
    const e = document.createElementNS(ns, name);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text) e.textContent = text;
    svg.appendChild(e);
    return e;
  };
  const all = results.measurements.map((m) => m.mbps).filter((x) => x > 0);
  const max = Math.max(1, ...all);
  const min = Math.max(0.01, Math.min(max / 10, ...all));
  const y = (v) => H - pad - ((Math.log10(v) - Math.log10(min)) / (Math.log10(max) - Math.log10(min) || 1)) * (H - 2 * pad);
  const half = (W - 2 * pad) * 0.7;
  el("text", { x: pad, y: 16, class: "axis" }, "Mbit/s (log)");
  el("line", { x1: pad, y1: H - pad, x2: pad + half, y2: H - pad, class: "axis-line" });
  ["download", "upload"].forEach((kind, k) => {
    const ms = results.measurements.filter((m) => m.kind === kind);
    const x0 = pad + (k * half) / 2, w = half / 2 - 10;
    ms.forEach((m, i) => el("circle", { cx: x0 + ((i + 0.5) * w) / Math.max(1, ms.length), cy: y(Math.max(min, m.mbps || min)), r: 3, class: "dot-" + kind }));
    const s = results[kind];
    if (s && s.mbps_p90) el("line", { x1: x0, x2: x0 + w, y1: y(s.mbps_p90), y2: y(s.mbps_p90), class: "p90" });
    el("text", { x: x0, y: H - pad + 16, class: "axis" }, kind + (s ? ` ${fmt(s.mbps_p90)}` : ""));
  });
  // Latency bars.
  const lat = [["idle", l && l.idle_ms], ["down", d && d.loaded_latency_ms.own_connection], ["up", u && u.loaded_latency_ms.own_connection]];
  const lmax = Math.max(1, ...lat.map((x) => x[1] || 0));
  const lx = pad + half + 30, lw = (W - lx - 10) / 3;
  el("text", { x: lx, y: 16, class: "axis" }, "latency ms");
  lat.forEach(([name, v], i) => {
    const h = ((v || 0) / lmax) * (H - 2 * pad);
    el("rect", { x: lx + i * lw + 4, y: H - pad - h, width: lw - 8, height: h, class: "bar" });
    el("text", { x: lx + i * lw + 4, y: H - pad + 16, class: "axis" }, `${name} ${fmt(v)}`);
  });
  $("chart").replaceChildren(svg);
}

function publish() {
  const text = JSON.stringify(results, null, 2);
  $("results-json").textContent = text;
  $("copy").disabled = false;
  $("save").disabled = false;
  window.sluiceResults = results;
}

// What a test reads: whether each part of the page is on screen at this width.
function layout() {
  const ids = ["start", "card-latency", "card-down", "card-up", "card-rpm", "chart", "table", "results-json"];
  const out = { width: innerWidth, elements: {} };
  for (const id of ids) {
    const r = $(id).getBoundingClientRect();
    out.elements[id] = { visible: r.width > 0 && r.height > 0, fits: r.left >= -1 && r.right <= innerWidth + 1 };
  }
  let pre = $("layout");
  if (!pre) {
    pre = document.createElement("pre");
    pre.id = "layout";
    pre.hidden = true;
    document.body.appendChild(pre);
  }
  pre.textContent = JSON.stringify(out);
}

async function run() {
  const button = $("start");
  button.disabled = true;
  $("rows").replaceChildren();
  results.measurements = [];
  results.started = new Date().toISOString();
  const status = (s) => ($("status").textContent = s);
  try {
    status("Measuring latency…");
    await idleLatency();
    status("Measuring download…");
    let ms = [];
    const dl = await underLoad(async () => {
      ms = await transfers("download", DOWN_SIZES, downloadOnce, (done) => ($("down").textContent = fmt(percentile(done.map((m) => m.mbps), 0.9))));
    });
    results.download = summary("download", ms, dl);
    $("down").textContent = fmt(results.download.mbps_p90);
    $("down-detail").textContent = `median ${fmt(results.download.mbps_median)}, ${ms.length} transfers, ${ms.length ? ms[ms.length - 1].protocol : ""}`;
    status("Measuring upload…");
    const ul = await underLoad(async () => {
      ms = await transfers("upload", UP_SIZES, uploadOnce, (done) => ($("up").textContent = fmt(percentile(done.map((m) => m.mbps), 0.9))));
    });
    results.upload = summary("upload", ms, ul);
    $("up").textContent = fmt(results.upload.mbps_p90);
    $("up-detail").textContent = `median ${fmt(results.upload.mbps_median)}, ${ms.length} transfers (timed by the server)`;
    showRpm();
    chart();
    status(`Done: download ${fmt(results.download.mbps_p90)} Mbit/s, upload ${fmt(results.upload.mbps_p90)} Mbit/s, ${results.rpm ?? "–"} RPM.`);
    results.finished = new Date().toISOString();
  } catch (e) {
    results.error = String(e);
    status("Failed: " + e.message);
  } finally {
    publish();
    layout();
    document.body.dataset.done = "1";
    button.disabled = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("start").addEventListener("click", run);
  $("copy").addEventListener("click", () => navigator.clipboard && navigator.clipboard.writeText($("results-json").textContent));
  $("save").addEventListener("click", () => {
    const a = document.createElement("a");
    a.href = URL.createObjectURL(new Blob([$("results-json").textContent], { type: "application/json" }));
    a.download = "sluice-speedtest.json";
    a.click();
  });
  if (params.has("auto")) run();
});
