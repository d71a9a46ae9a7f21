// CONNECT (RFC 9113 §8.5) and CONNECT-UDP (RFC 9298, DATAGRAM capsules on the stream) over
// HTTP/2 with Node's http2, for Sluice's tests. Prints one JSON object.
//   node connect_h2.js tcp PROXY_PORT HOST PORT [USER:PASS]
//     CONNECT HOST:PORT, send an HTTP/1.1 GET / through the tunnel, print what came back.
//   node connect_h2.js udp PROXY_PORT HOST PORT COUNT
//     CONNECT-UDP to a UDP echo: COUNT payloads one at a time, each after the previous echo.
//   node connect_h2.js stall PROXY_PORT HOST PORT
//     CONNECT, then never read: pause the stream and wait (the proxy must not hold more than
//     its windows for us); prints after 3 s.
const http2 = require('http2');
const [mode, port, host, tport] = process.argv.slice(2, 6);
const s = http2.connect(`https://127.0.0.1:${port}`, {rejectUnauthorized: false});
const out = {status: null};
const done = (code) => { console.log(JSON.stringify(out)); s.destroy(); process.exit(code); };
s.on('error', (e) => { out.error = e.message; done(1); });
const varint = (v) => v < 64 ? Buffer.from([v]) : Buffer.from([0x40 | (v >> 8), v & 0xff]);
const capsule = (p) => Buffer.concat([varint(0), varint(p.length + 1), Buffer.from([0]), p]);
s.on('remoteSettings', (st) => {
  if (out.status !== null || out.settings !== undefined) return;
  out.settings = !!st.enableConnectProtocol;
  if (mode === 'tcp' || mode === 'stall') {
    const h = {':method': 'CONNECT', ':authority': `${host}:${tport}`};
    if (process.argv[6]) h['proxy-authorization'] = 'Basic ' + Buffer.from(process.argv[6]).toString('base64');
    const req = s.request(h, {endStream: false});
    let data = Buffer.alloc(0);
    req.on('response', (hd) => {
      out.status = hd[':status'];
      out.proxy_status = hd['proxy-status'];
      if (out.status !== 200) { req.close(); return done(0); }
      if (mode === 'stall') {
        req.pause();
        req.write('GET /big HTTP/1.1\r\nHost: x\r\n\r\n');
        return setTimeout(() => { out.stalled = true; done(0); }, 3000);
      }
      req.end('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    });
    req.on('data', (d) => { data = Buffer.concat([data, d]); });
    req.on('end', () => { out.data = data.toString(); done(0); });
    req.on('error', (e) => { out.error = e.message; done(1); });
    return;
  }
  const count = Number(process.argv[6] || 3);
  const req = s.request({':method': 'CONNECT', ':protocol': 'connect-udp', ':scheme': 'https',
    ':authority': `127.0.0.1:${port}`, ':path': `/.well-known/masque/udp/${host}/${tport}/`,
    'capsule-protocol': '?1'}, {endStream: false});
  out.echoed = 0; out.rtt_ms = [];
  let buf = Buffer.alloc(0), n = 0, sent = 0n;
  const send = () => { sent = process.hrtime.bigint(); req.write(capsule(Buffer.from(`p${n}`))); };
  req.on('response', (hd) => {
    out.status = hd[':status']; out.capsule_protocol = hd['capsule-protocol'];
    if (out.status !== 200) return done(0);
    send();
  });
  req.on('data', (d) => {
    buf = Buffer.concat([buf, d]);
    // Whole capsules of one-byte varints (our payloads are small).
    while (buf.length >= 2 && buf.length >= 2 + buf[1]) {
      const [ty, len] = [buf[0], buf[1]];
      const v = buf.slice(2, 2 + len);
      buf = buf.slice(2 + len);
      if (ty === 0 && v[0] === 0 && v.slice(1).toString() === `p${n}`) {
        out.echoed += 1;
        out.rtt_ms.push(Number(process.hrtime.bigint() - sent) / 1e6);
        n += 1;
        if (n >= count) { req.close(); return done(0); }
        send();
      }
    }
  });
  req.on('error', (e) => { out.error = e.message; done(1); });
});
setTimeout(() => { out.error = 'timeout'; done(1); }, 10000);
