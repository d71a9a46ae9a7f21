#!/usr/bin/env node
// h2post.js: POST a body over HTTP/2 with Node's http2 client and report how the exchange
// ended, for Sluice's integration tests.
//
// Usage: node scripts/h2post.js URL BYTES [--timeout SECONDS]
//   Sends BYTES bytes (declared in content-length) as fast as the stream takes them, and
//   prints one JSON line: {"status": N, "rstCode": C, "aborted": bool, "sent": BYTES_SENT}
//   once the stream has closed: rstCode is the RST_STREAM code the stream ended with (0:
//   NO_ERROR, as a server sends after a complete response to a body it does not need).
//   Certificates are not verified. Exit status 0 when the stream closed, 3 on timeout
//   (default 20 s), 2 on a connection error.
'use strict';
const http2 = require('http2');

const [url, bytes] = [process.argv[2], Number(process.argv[3])];
const timeoutAt = process.argv.indexOf('--timeout');
const seconds = timeoutAt > 0 ? Number(process.argv[timeoutAt + 1]) : 20;
if (!url || !Number.isFinite(bytes)) {
  console.error('usage: node h2post.js URL BYTES [--timeout SECONDS]');
  process.exit(2);
}
const target = new URL(url);
const client = http2.connect(target.origin, { rejectUnauthorized: false });
const timer = setTimeout(() => {
  console.error(`h2post: no end within ${seconds}s`);
  process.exit(3);
}, seconds * 1000);
client.on('error', (e) => {
  console.error(`h2post: connection error ${e.code || e.message}`);
  process.exit(2);
});
const req = client.request({
  ':method': 'POST',
  ':path': target.pathname + target.search,
  'content-length': String(bytes),
});
let status = 0;
let aborted = false;
let sent = 0;
req.on('response', (h) => { status = h[':status']; });
req.on('data', () => {});
req.on('aborted', () => { aborted = true; });
// A reset stream reports an error event too; how it ended is in rstCode.
req.on('error', () => {});
req.on('close', () => {
  clearTimeout(timer);
  console.log(JSON.stringify({ status, rstCode: req.rstCode, aborted, sent }));
  client.close();
});
const chunk = Buffer.alloc(64 * 1024, 7);
function pump() {
  while (sent < bytes && !req.destroyed) {
    const piece = sent + chunk.length <= bytes ? chunk : chunk.subarray(0, bytes - sent);
    sent += piece.length;
    if (!req.write(piece)) {
      req.once('drain', pump);
      return;
    }
  }
  if (!req.destroyed) req.end();
}
pump();
