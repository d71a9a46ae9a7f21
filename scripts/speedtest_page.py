#!/usr/bin/env python3
"""speedtest_page.py: run Sluice's speed-test page (or any page that sets window.sluiceResults
and document.body.dataset.done = "1" when it is done) in headless Chromium, in real time,
through the DevTools protocol (PyPI `websockets`), and print its results.

Usage: speedtest_page.py URL [--width W] [--height H] [--timeout S] [--screenshot FILE [--full]]
                          [--chrome-arg FLAG]...

URL is the page (e.g. https://10.99.0.2:8443/speedtest.html?auto=1). The window is W × H CSS
pixels (default 1280 × 900; below 600 it is emulated as a phone: touch, device scale 2), the
page runs until it marks itself done (document.body.dataset.done) or S seconds (default 180)
pass. Prints one JSON object: {"results": the page's JSON, "layout": its layout report}.
With --screenshot, a PNG of the window at the end (--full: the whole page). --chrome-arg
passes a flag on (`--disable-http2` for HTTP/1.1; `--enable-quic
--origin-to-force-quic-on=HOST:PORT` for HTTP/3). Certificates are not verified (the lab's
and the tests' are self-signed).
"""
import argparse
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from websockets.sync.client import connect


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--height", type=int, default=900)
    p.add_argument("--timeout", type=float, default=180)
    p.add_argument("--screenshot")
    p.add_argument("--full", action="store_true", help="screenshot the whole page, not the window")
    p.add_argument("--chrome-arg", action="append", default=[], help="one more Chromium flag (repeatable)")
    a = p.parse_args()
    profile = tempfile.mkdtemp(prefix="sluice-cdp-")
    chrome = subprocess.Popen(
        ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--ignore-certificate-errors", f"--user-data-dir={profile}", "--remote-debugging-port=0",
         *a.chrome_arg, "about:blank"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        ws_url = None
        deadline = time.monotonic() + 30
        while ws_url is None and time.monotonic() < deadline:
            line = chrome.stderr.readline()
            m = re.search(r"(ws://\S+/devtools/browser/\S+)", line)
            if m:
                ws_url = m.group(1)
        if not ws_url:
            sys.exit("chromium did not start its DevTools endpoint")
        with connect(ws_url, max_size=64 << 20) as ws:
            seq = [0]

            def call(method, params=None, session=None):
                seq[0] += 1
                msg = {"id": seq[0], "method": method, "params": params or {}}
                if session:
                    msg["sessionId"] = session
                ws.send(json.dumps(msg))
                while True:
                    r = json.loads(ws.recv(timeout=60))
                    if r.get("id") == seq[0]:
                        if "error" in r:
                            raise RuntimeError(f"{method}: {r['error']}")
                        return r.get("result", {})

            target = call("Target.createTarget", {"url": "about:blank"})["targetId"]
            s = call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            phone = a.width < 600
            call("Emulation.setDeviceMetricsOverride",
                 {"width": a.width, "height": a.height, "deviceScaleFactor": 2 if phone else 1, "mobile": phone}, s)
            if phone:
                call("Emulation.setTouchEmulationEnabled", {"enabled": True}, s)
            call("Page.enable", {}, s)
            call("Page.navigate", {"url": a.url}, s)

            def evaluate(expr):
                r = call("Runtime.evaluate", {"expression": expr, "returnByValue": True}, s)
                return r.get("result", {}).get("value")

            deadline = time.monotonic() + a.timeout
            while time.monotonic() < deadline:
                if evaluate("document.body && document.body.dataset.done") == "1":
                    break
                time.sleep(0.5)
            results = evaluate("JSON.stringify(window.sluiceResults || null)")
            layout = evaluate("(document.getElementById('layout') || {}).textContent || 'null'")
            if a.screenshot:
                shot = call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": a.full}, s)
                with open(a.screenshot, "wb") as f:
                    f.write(base64.b64decode(shot["data"]))
            print(json.dumps({"results": json.loads(results or "null"), "layout": json.loads(layout)}))
    finally:
        chrome.terminate()
        try:
            chrome.wait(10)
        except subprocess.TimeoutExpired:
            chrome.kill()
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
