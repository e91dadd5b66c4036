#!/usr/bin/env python3
"""Drives the inspector's page (--inspect) in headless Chromium through
chromedriver's WebDriver protocol, with nothing but the standard library.

    inspector_page.py URL EXPECTED_ROWS NAME

Loads URL, waits until the page's table shows EXPECTED_ROWS processes and
one of them has the registered name NAME, checks the counters are shown,
clicks the terminate button of a row that is not NAME's, and waits until
that row is gone. Prints what it did; exits 0 on success, 1 on a failed
check, 77 when Chromium or chromedriver is missing (the caller skips).
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Driver:
    def __init__(self, base):
        self.base = base
        self.session = None

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return json.loads(r.read() or b"{}").get("value")
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{method} {path}: {e.code} {e.read()[:300]!r}")

    def s(self, method, path, body=None):
        return self.call(method, f"/session/{self.session}{path}", body)

    def start(self, browser):
        caps = {"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
            "binary": browser,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]}}}}
        self.session = self.call("POST", "/session", caps)["sessionId"]

    def js(self, script, *args):
        return self.s("POST", "/execute/sync", {"script": script, "args": list(args)})

    def find_all(self, css):
        return [list(e.values())[0] for e in self.s("POST", "/elements", {"using": "css selector", "value": css})]

    def attr(self, el, name):
        return self.s("GET", f"/element/{el}/attribute/{name}")

    def text(self, el):
        return self.s("GET", f"/element/{el}/text")


def wait_for(what, cond, secs=20):
    deadline = time.time() + secs
    last = None
    while time.time() < deadline:
        try:
            last = cond()
            if last:
                return last
        except (RuntimeError, OSError) as e:  # not up yet; an element replaced between two calls
            last = e
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen within {secs} s (last: {last})")


def main():
    url, expected, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    chromedriver = shutil.which("chromedriver")
    if not browser or not chromedriver:
        print("skip: chromium or chromedriver is not installed")
        return 77
    port = free_port()
    proc = subprocess.Popen([chromedriver, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    d = Driver(f"http://127.0.0.1:{port}")
    try:
        wait_for("chromedriver start", lambda: d.call("GET", "/status").get("ready"))
        d.start(browser)
        d.s("POST", "/url", {"url": url})
        # The page redraws its rows every second: each is read in one
        # script (no element kept between calls), and a click that meets a
        # redrawn button is tried again.
        read_rows = "return [...document.querySelectorAll('#rows tr')].map(r => [r.dataset.pid, r.innerText])"
        rows = wait_for(f"{expected} rows", lambda: (lambda r: r if len(r) == expected else None)(d.js(read_rows)))
        print(f"the page shows {len(rows)} rows")
        named = next((pid for pid, text in rows if name in text), None)
        assert named, f"no row shows the name {name}"
        assert any("spawned by: " + named in text for _, text in rows), "no row shows it was spawned by the root"
        wait_for("the processes counter to say " + str(expected),
                 lambda: d.js("return document.getElementById('stat-processes').innerText") == str(expected))
        victim = next(pid for pid, _ in rows if pid != named)

        def click():
            for b in d.find_all("button.terminate"):
                if d.attr(b, "data-pid") == victim:
                    d.s("POST", f"/element/{b}/click", {})
                    return True
            return False
        wait_for(f"a click on {victim}'s terminate button", click)
        wait_for(f"{victim}'s row to go", lambda: all(pid != victim for pid, _ in d.js(read_rows)))
        note = d.text(d.find_all("#note")[0])
        assert victim in note, f"the note says {note!r}"
        print(f"clicked terminate on {victim}; its row is gone; the note says {note!r}")
        print("VICTIM " + victim)
        return 0
    except AssertionError as e:
        print(f"FAIL: {e}")
        return 1
    finally:
        try:
            if d.session:
                d.call("DELETE", f"/session/{d.session}")
        except Exception:
            pass
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
