// The origin of sluice-lab's `earlyhints` experiment (Node's `http` module, HTTP/1.1):
//
//   node earlyhints-origin.js DOCROOT PORT THINK_MS
//
// serves every file under DOCROOT from memory on 127.0.0.1:PORT. DOCROOT/pages.json names the
// pages: `{"/links/page.html": {"links": ["</links/style.css>; rel=preload; as=style", ...],
// "send103": false}, ...}`. A page is answered after THINK_MS ms (the application "thinking")
// with those `Link` fields and `Cache-Control: no-store`; with `send103` a 103 Early Hints with
// the same links goes out at once, before the thinking. Every other file is answered at once and
// is cacheable (`Cache-Control: max-age=3600`): Chromium keeps an early-hints preload in its HTTP
// cache and uses it only if it may.
//
// `.../hold?id=X` is held until `.../release?id=X` arrives (or 15 s pass), then answered with a
// 1x1 GIF: the page loads it as an image that is never shown, which holds its load event (and
// so Chromium's --dump-dom) until the page has seen its first-contentful-paint and
// largest-contentful-paint and written them into the DOM.
'use strict';
const http = require('http');
const fs = require('fs');
const path = require('path');

const [root, port, think] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
if (!root || !(port > 0) || !(think >= 0)) {
  console.error('usage: node earlyhints-origin.js DOCROOT PORT THINK_MS');
  process.exit(2);
}
const pages = JSON.parse(fs.readFileSync(path.join(root, 'pages.json'), 'utf8'));
const types = {
  '.html': 'text/html; charset=utf-8',
  '.css': 'text/css',
  '.js': 'text/javascript',
  '.woff2': 'font/woff2',
};
const files = new Map();
(function walk(dir) {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) walk(p);
    else files.set('/' + path.relative(root, p).split(path.sep).join('/'), fs.readFileSync(p));
  }
})(root);
const GIF = Buffer.from('R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7', 'base64');
const held = new Map();
const stats = { pages: 0, hints: 0, files: 0, held: 0 };

http
  .createServer((req, res) => {
    const url = new URL(req.url, 'http://origin');
    const name = url.pathname;
    if (name.endsWith('/hold')) {
      const id = url.searchParams.get('id') || '';
      const answer = () => {
        clearTimeout(timer);
        held.delete(id);
        res.writeHead(200, { 'content-type': 'image/gif', 'content-length': GIF.length, 'cache-control': 'no-store' });
        res.end(GIF);
      };
      const timer = setTimeout(answer, 15000);
      held.set(id, answer);
      stats.held += 1;
      return;
    }
    if (name.endsWith('/release')) {
      const answer = held.get(url.searchParams.get('id') || '');
      if (answer) answer();
      res.writeHead(204, { 'cache-control': 'no-store' });
      res.end();
      return;
    }
    const body = files.get(name);
    if (!body || name === '/pages.json') {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('not found\n');
      return;
    }
    const type = types[path.extname(name)] || 'application/octet-stream';
    const page = pages[name];
    if (page) {
      stats.pages += 1;
      if (page.send103) {
        res.writeEarlyHints({ link: page.links });
        stats.hints += 1;
      }
      setTimeout(() => {
        res.writeHead(200, {
          'content-type': type,
          'content-length': body.length,
          'cache-control': 'no-store',
          link: page.links,
        });
        res.end(body);
      }, think);
      return;
    }
    stats.files += 1;
    res.writeHead(200, { 'content-type': type, 'content-length': body.length, 'cache-control': 'max-age=3600' });
    res.end(body);
  })
  .listen(port, '127.0.0.1', () => {
    console.log(`earlyhints origin: ${files.size} files on 127.0.0.1:${port}, think ${think} ms`);
  });

process.on('SIGTERM', () => {
  console.log(`earlyhints origin: ${JSON.stringify(stats)}`);
  process.exit(0);
});
