"""A small Chrome DevTools Protocol client over `--remote-debugging-pipe` (no websocket, no
driver, no download): Debian's chromium, headless, driven the way Playwright drives it.

Chromium reads commands from fd 3 and writes replies and events to fd 4, each message a JSON
object ended by a NUL byte.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--remote-debugging-pipe"]


class Browser:
    """One headless chromium with one page; `console` collects errors and CSP refusals."""

    def __init__(self, profile: Path, *, width: int = 1280, height: int = 900) -> None:
        to_child, self._to_chromium = os.pipe()
        self._from_chromium, from_child = os.pipe()

        def plumb() -> None:  # in the child: its ends of the pipes become fds 3 and 4
            reading, writing = os.dup(to_child), os.dup(from_child)  # off 3 and 4 first
            os.dup2(reading, 3)
            os.dup2(writing, 4)

        self.process = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            preexec_fn=plumb, close_fds=False,  # fds 3 and 4 (dup2'd) reach chromium
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child)
        os.close(from_child)
        self._next_id, self._replies, self._lock = 0, {}, threading.Condition()
        self.console: list[str] = []
        self.dialogs: list[str] = []
        self._load_count = 0
        threading.Thread(target=self._read, daemon=True).start()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.call(domain, session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def _read(self) -> None:
        buffer = b""
        while True:
            chunk = os.read(self._from_chromium, 65536)
            if not chunk:
                return
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for raw in messages:
                self._dispatch(json.loads(raw))

    def _dispatch(self, message: dict) -> None:
        method = message.get("method")
        if method == "Page.loadEventFired":
            with self._lock:
                self._load_count += 1
                self._lock.notify_all()
        elif method == "Page.javascriptDialogOpening":
            self.dialogs.append(message["params"]["message"])
        elif method == "Runtime.exceptionThrown":
            self.console.append("exception: " + json.dumps(message["params"]["exceptionDetails"])[:500])
        elif method == "Log.entryAdded" and message["params"]["entry"]["level"] == "error":
            self.console.append("log: " + message["params"]["entry"]["text"])
        elif method == "Runtime.consoleAPICalled" and message["params"]["type"] == "error":
            self.console.append("console: " + json.dumps(message["params"]["args"])[:500])
        elif "id" in message:
            with self._lock:
                self._replies[message["id"]] = message
                self._lock.notify_all()

    def call(self, method: str, *, session: bool = False, timeout: float = 30.0, **params):
        with self._lock:
            self._next_id += 1
            number = self._next_id
        message = {"id": number, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_chromium, json.dumps(message).encode() + b"\0")
        with self._lock:
            if not self._lock.wait_for(lambda: number in self._replies, timeout):
                raise TimeoutError(f"chromium did not answer {method} in {timeout}s")
            reply = self._replies.pop(number)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def open(self, url: str, timeout: float = 90.0) -> None:
        with self._lock:
            loads = self._load_count
        self.call("Page.navigate", session=True, url=url)
        with self._lock:
            if not self._lock.wait_for(lambda: self._load_count > loads, timeout):
                raise TimeoutError(f"{url} did not load in {timeout}s")

    def open_by(self, action, timeout: float = 90.0) -> None:
        """Run `action` (a click, a form submit) and wait for the page it loads."""
        with self._lock:
            loads = self._load_count
        action()
        with self._lock:
            if not self._lock.wait_for(lambda: self._load_count > loads, timeout):
                raise TimeoutError(f"no page loaded within {timeout}s")

    def js(self, expression: str):
        result = self.call("Runtime.evaluate", session=True, expression=expression,
                           returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.1)
        state = self.js("location.href + ' ' + document.readyState + ' ' + "
                        "document.body.innerHTML.slice(0, 300)")
        raise TimeoutError(f"{expression} still false after {timeout}s on {state}; console: "
                           f"{self.console}")

    def click(self, selector: str) -> None:
        self.js(f"document.querySelector({json.dumps(selector)}).click()")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except (TimeoutError, RuntimeError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_chromium)
        os.close(self._from_chromium)
