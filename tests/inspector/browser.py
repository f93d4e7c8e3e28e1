"""Headless Chromium driven over the DevTools protocol (an aiohttp websocket), for page tests.

No Selenium or Playwright: the browser is the system's Chromium (Debian package
`chromium`), found by tests/support/system_tools.py. A `Page` records every console message,
log entry, uncaught exception, JavaScript dialog and CSP violation so a test can assert there
were none.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import aiohttp
from yarl import URL

FLAGS: Final = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)
_LISTENING: Final = re.compile(r"DevTools listening on (ws://\S+)")
# Calls `test` every 20 ms until it returns something truthy or `ms` pass; resolves to
# whether it did and the value (a DOM node is truthy here but serializes as {}).
_POLL: Final = """(test, ms) => new Promise((resolve) => {
  const end = Date.now() + ms;
  const poll = () => {
    let value = null;
    try { value = test(); } catch { value = null; }
    if (value || Date.now() > end) resolve({ ok: Boolean(value), value });
    else setTimeout(poll, 20);
  };
  poll();
})"""
# Runs before any page script and outside the page's CSP (DevTools injects it).
_WATCH_CSP: Final = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) =>
  window.__cspViolations.push(`${e.violatedDirective} blocked ${e.blockedURI || "inline"}`));
"""


class Page:
    """One tab over its own DevTools websocket: commands, events and what went wrong."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._changed = asyncio.Event()
        self.events: list[dict[str, Any]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self._ws:
            data = json.loads(msg.data)
            if "id" in data:
                future = self._pending.pop(data["id"])
                if "error" in data:
                    future.set_exception(RuntimeError(f"CDP error: {data['error']}"))
                else:
                    future.set_result(data.get("result", {}))
            else:
                self.events.append(data)
                self._changed.set()
                if data["method"] == "Page.javascriptDialogOpening":
                    # An open dialog blocks the page; dismiss it (problems() reports it).
                    self._tasks.add(asyncio.create_task(self._dismiss()))
        for future in self._pending.values():
            future.set_exception(ConnectionError("the DevTools connection closed"))

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        await self._ws.send_json({"id": call_id, "method": method, "params": params})
        return await asyncio.wait_for(future, 30)

    async def _dismiss(self) -> None:
        await self.send("Page.handleJavaScriptDialog", accept=False)

    async def start(self) -> None:
        for domain in ("Page", "Runtime", "Log", "Network"):
            await self.send(f"{domain}.enable")
        await self.send("Page.addScriptToEvaluateOnNewDocument", source=_WATCH_CSP)

    async def wait_event(self, method: str, after: int, seconds: float = 15) -> dict[str, Any]:
        """The first `method` event at index `after` or later in `events`."""
        async with asyncio.timeout(seconds):
            while True:
                for event in self.events[after:]:
                    if event["method"] == method:
                        return event
                self._changed.clear()
                await self._changed.wait()

    async def navigate(self, url: str) -> None:
        mark = len(self.events)
        result = await self.send("Page.navigate", url=url)
        if result.get("errorText"):
            raise AssertionError(f"navigating to {url} failed: {result['errorText']}")
        await self.wait_event("Page.loadEventFired", mark)

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (promises awaited); page errors raise."""
        result = await self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, seconds: float = 10) -> Any:
        """Wait until the expression is truthy (polled in the page); its value."""
        poll = f"({_POLL})(() => ({expression}), {seconds * 1000})"
        result = await self.evaluate(poll)
        if not result["ok"]:
            problems = await self.problems()
            raise AssertionError(f"still falsy after {seconds}s: {expression} ({problems=})")
        return result.get("value")

    async def click(self, selector: str) -> None:
        found = await self.evaluate(
            f"(() => {{ const el = document.querySelector({json.dumps(selector)});"
            " if (!el) return false; el.click(); return true; })()"
        )
        assert found, f"nothing matches {selector}"

    async def screenshot(self, path: Path) -> Path:
        """The whole page as a PNG at `path`."""
        metrics = await self.send("Page.getLayoutMetrics")
        size = metrics["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = await self.send(
            "Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True
        )
        await asyncio.to_thread(path.write_bytes, base64.b64decode(shot["data"]))
        return path

    async def problems(self) -> list[str]:
        """Console errors and warnings, log entries, exceptions, dialogs, CSP violations."""
        found: list[str] = []
        for event in self.events:
            method, params = event["method"], event["params"]
            if method == "Runtime.consoleAPICalled" and params["type"] in {
                "error",
                "warning",
                "assert",
            }:
                args = [a.get("value", a.get("description")) for a in params["args"]]
                found.append(f"console.{params['type']}: {args}")
            elif method == "Log.entryAdded" and params["entry"]["level"] in {"error", "warning"}:
                entry = params["entry"]
                found.append(f"log {entry['level']} ({entry['source']}): {entry['text']}")
            elif method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                found.append(f"exception: {details.get('exception', {}).get('description')}")
            elif method == "Page.javascriptDialogOpening":
                found.append(f"dialog {params['type']}: {params['message']}")
        violations = await self.evaluate("window.__cspViolations || []")
        found += [f"CSP violation: {v}" for v in violations]
        return found

    async def close(self) -> None:
        await self._ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


async def _devtools_port(proc: asyncio.subprocess.Process, log: list[str]) -> int:
    """Read stderr until Chromium says where DevTools listens; keep draining it after."""
    assert proc.stderr is not None
    async with asyncio.timeout(30):
        while line := (await proc.stderr.readline()).decode(errors="replace"):
            log.append(line)
            if match := _LISTENING.search(line):
                port = URL(match.group(1)).port
                assert port is not None
                return port
    raise RuntimeError("Chromium exited before DevTools listened:\n" + "".join(log))


async def _drain(stream: asyncio.StreamReader, log: list[str]) -> None:
    # A full stderr pipe would block the browser.
    while line := await stream.readline():
        log.append(line.decode(errors="replace"))


@contextlib.asynccontextmanager
async def chromium(binary: str, profile: Path) -> AsyncIterator[Page]:
    """A headless Chromium with a fresh profile, and its one tab as a `Page`. Its temporary
    folder is its own, removed after it: the folder of its singleton socket
    (org.chromium.Chromium.*) outlives a terminated browser, and left in /tmp one a run
    would pile up. Short, in /tmp: a socket's path must fit in 108 bytes."""
    scratch = tempfile.mkdtemp(prefix="tap-chromium-")
    proc = await asyncio.create_subprocess_exec(
        binary, *FLAGS, f"--user-data-dir={profile}", "about:blank",
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "TMPDIR": scratch},
    )  # fmt: skip
    log: list[str] = []
    drain: asyncio.Task[None] | None = None
    try:
        port = await _devtools_port(proc, log)
        assert proc.stderr is not None
        drain = asyncio.create_task(_drain(proc.stderr, log))
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/json/list") as resp:
                targets = await resp.json()
            page_ws = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            ws = await session.ws_connect(page_ws, max_msg_size=0)
            page = Page(ws)
            try:
                await page.start()
                yield page
            finally:
                await page.close()
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        shutil.rmtree(scratch, ignore_errors=True)
        if drain is not None:
            drain.cancel()
