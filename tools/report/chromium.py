"""tools/report/chromium.py — headless Chromium driven over the DevTools protocol on a pipe.

The report's PNG output (llmtrain-report --png) and the report's browser test both open the page in a
real Chromium (Debian's `chromium`), read what its console said, evaluate JavaScript in it and take a
screenshot. The protocol runs over --remote-debugging-pipe (fd 3: commands in, fd 4: replies and events
out, each message JSON ended by a NUL byte), so no port is opened and no package beyond Python's
standard library is needed. Chromium runs with the flags it needs on a closed network and as root
(docs/report.md "The browser"): --headless --no-sandbox --disable-gpu and no background networking.
Errors: ChromiumError with the method, Chromium's answer or the tail of its stderr.
"""
import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
         "--disable-dev-shm-usage",  # containers give /dev/shm 64 MB: a renderer could crash
         "--remote-debugging-pipe"]


class ChromiumError(Exception):
    """Chromium missing, exited, timed out or answered a command with an error."""


def find_chromium():
    """Path of the Chromium binary: $CHROMIUM, else chromium / chromium-browser / google-chrome on PATH,
    else None."""
    if os.environ.get("CHROMIUM"):
        return os.environ["CHROMIUM"]
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


class Chromium:
    """One headless Chromium process with one page (a tab) attached; use as a context manager.

    events: every protocol event of the page seen so far, as (method, params), in order.
    """

    def __init__(self, binary=None, width=1280, height=800, timeout_s=60):
        self.binary = binary or find_chromium()
        if not self.binary:
            raise ChromiumError("no chromium found (apt-get install chromium, or set $CHROMIUM)")
        self.width, self.height, self.timeout_s = width, height, timeout_s
        self.events = []
        self._next_id = 0
        self._buf = b""

    def __enter__(self):
        self._profile = tempfile.mkdtemp(prefix="llmtrain_chromium.")
        self._stderr = open(os.path.join(self._profile, "stderr.txt"), "w+b")
        to_chrome_r, to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()
        # The child's ends at fds >= 10, then dup2'd to 3 and 4 (dup2 clears close-on-exec).
        hi_r = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD_CLOEXEC, 10)
        hi_w = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD_CLOEXEC, 10)
        for fd in (to_chrome_r, from_chrome_w):
            os.close(fd)

        def child_fds():
            os.dup2(hi_r, 3)
            os.dup2(hi_w, 4)

        argv = [self.binary, *FLAGS, f"--user-data-dir={self._profile}/profile",
                f"--window-size={self.width},{self.height}", "about:blank"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._stderr, stderr=self._stderr,
                                     close_fds=False, preexec_fn=child_fds)
        os.close(hi_r)
        os.close(hi_w)
        self._out, self._in = to_chrome_w, from_chrome_r
        try:
            target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.send(f"{domain}.enable", page=True)
            self.send("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height,
                                                             "deviceScaleFactor": 1, "mobile": False}, page=True)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        try:
            if self.proc.poll() is None:
                self._write({"id": 0, "method": "Browser.close"})
                self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        for fd in (self._out, self._in):
            os.close(fd)
        self._stderr.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def stderr_tail(self, n=2000):
        """The last n bytes Chromium wrote to stdout/stderr, as text."""
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read()[-n:].decode(errors="replace")

    def _write(self, msg):
        os.write(self._out, json.dumps(msg).encode() + b"\0")

    def _read(self, deadline):
        """The next message from Chromium; ChromiumError past the deadline or when it exited."""
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChromiumError(f"no answer from chromium within {self.timeout_s} s; its output:\n"
                                    + self.stderr_tail())
            if select.select([self._in], [], [], min(left, 1.0))[0]:
                chunk = os.read(self._in, 1 << 20)
                if not chunk:
                    raise ChromiumError(f"chromium exited (status {self.proc.poll()}); its output:\n"
                                        + self.stderr_tail())
                self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method, params=None, page=False):
        """Sends one command (to the page's session when page=True) and returns its result dict.

        Events that arrive meanwhile are appended to self.events. Errors: ChromiumError with the
        protocol's error message, or on a timeout (timeout_s).
        """
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if page:
            msg["sessionId"] = self.session
        self._write(msg)
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise ChromiumError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append((reply["method"], reply.get("params", {})))

    def open(self, path):
        """Loads a local file in the page and waits for its load event."""
        seen = len(self.events)
        self.send("Page.navigate", {"url": "file://" + os.path.abspath(path)}, page=True)
        deadline = time.monotonic() + self.timeout_s
        while not any(m == "Page.loadEventFired" for m, _ in self.events[seen:]):
            msg = self._read(deadline)
            if "method" in msg:
                self.events.append((msg["method"], msg.get("params", {})))

    def evaluate(self, expression):
        """The value of a JavaScript expression in the page (promises awaited), as JSON-decoded data.

        Errors: ChromiumError with the exception's text when the expression throws.
        """
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True},
                      page=True)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise ChromiumError(f"evaluating {expression[:60]!r}: "
                                + (d.get("exception", {}).get("description") or d.get("text", "")))
        return r["result"].get("value")

    def console_problems(self):
        """What the page said was wrong so far: console errors and warnings, uncaught exceptions, log
        entries of level error or warning, failed loads; one line of text each."""
        out = []
        for method, p in self.events:
            if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                out.append(f"console.{p['type']}: " + " ".join(str(a.get("value", a.get("description", "")))
                                                             for a in p.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append("exception: " + (d.get("exception", {}).get("description") or d.get("text", "")))
            elif method == "Log.entryAdded" and p["entry"].get("level") in ("error", "warning"):
                out.append(f"log {p['entry']['level']}: {p['entry'].get('text')} {p['entry'].get('url', '')}")
            elif method == "Network.loadingFailed":
                out.append(f"load failed: {p.get('errorText')}")
        return out

    def requested_urls(self):
        """Every URL the page asked for so far (Network.requestWillBeSent), in order."""
        return [p["request"]["url"] for m, p in self.events if m == "Network.requestWillBeSent"]

    def screenshot(self, path):
        """A PNG of the whole page (its full height at the window's width) written to path."""
        size = self.send("Page.getLayoutMetrics", page=True)["cssContentSize"]
        height = max(int(size["height"] + 0.999), 1)
        self.send("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": height,
                                                         "deviceScaleFactor": 1, "mobile": False}, page=True)
        png = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}, page=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(png["data"]))
