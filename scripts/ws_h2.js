// A WebSocket over HTTP/2 (RFC 8441) with Node's http2: extended CONNECT, one masked text
// frame per message, the echo read back one at a time. Prints JSON: whether the server sent
// SETTINGS_ENABLE_CONNECT_PROTOCOL, the response status, the echoed messages and each round
// trip in ms. Usage: node ws_h2.js PORT PATH [COUNT] [PROTOCOL]
const http2 = require('http2');
const [port, path, count, proto] = [process.argv[2], process.argv[3], Number(process.argv[4] || 3), process.argv[5] || 'websocket'];
const s = http2.connect(`https://127.0.0.1:${port}`, {rejectUnauthorized: false});
const out = {settings: null, status: null, echoed: [], rtt_ms: []};
const done = (code) => { console.log(JSON.stringify(out)); s.close(); process.exit(code); };
s.on('error', (e) => { out.error = e.message; done(1); });
s.on('remoteSettings', (st) => {
  out.settings = !!st.enableConnectProtocol;
  const req = s.request({':method': 'CONNECT', ':protocol': proto, ':path': path, ':scheme': 'https',
    ':authority': `127.0.0.1:${port}`, 'sec-websocket-version': '13'});
  let buf = Buffer.alloc(0), n = 0, sent = 0;
  const send = () => {
    const payload = Buffer.from(`m${n}`);
    const mask = Buffer.from([1, 2, 3, 4]);
    const f = Buffer.alloc(6 + payload.length);
    f[0] = 0x81; f[1] = 0x80 | payload.length; mask.copy(f, 2);
    for (let i = 0; i < payload.length; i++) f[6 + i] = payload[i] ^ mask[i % 4];
    sent = process.hrtime.bigint();
    req.write(f);
  };
  req.on('response', (h) => { out.status = h[':status']; if (out.status !== 200) done(1); send(); });
  req.on('data', (d) => {
    buf = Buffer.concat([buf, d]);
    while (buf.length >= 2 && buf.length >= 2 + (buf[1] & 0x7f)) {
      const len = buf[1] & 0x7f;
      out.echoed.push(buf.slice(2, 2 + len).toString());
      out.rtt_ms.push(Number(process.hrtime.bigint() - sent) / 1e6);
      buf = buf.slice(2 + len);
      n += 1;
      if (n >= count) { req.close(); return done(0); }
      send();
    }
  });
  req.on('error', (e) => { out.error = e.message; done(1); });
});
setTimeout(() => { out.error = 'timeout'; done(1); }, 10000);
