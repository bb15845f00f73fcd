"""Browser-test helpers: Debian ``chromium`` driven by the ``playwright`` package (never the Playwright browser
download), a page served from a launched demo, and small page actions."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest


CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    """The Chromium launcher for the browser tests; fails (never skips) when Chromium is missing."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("no chromium executable on PATH: `make test` installs it (apt-get install -y chromium)")
    return _without_realtime(exe)


@contextlib.contextmanager
def launched(exe: str):
    """One headless Chromium for several pages (a module's tests share it; launching one costs seconds).

    Playwright's sync API keeps an event loop running in this thread while it is open, so it is opened per test
    module, never for the whole session (``asyncio.run`` in other tests would refuse to start)."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@contextlib.contextmanager
def browser_page(url: str, exe, viewport: tuple[int, int] = (1400, 1000)):
    """A headless Chromium page opened on ``url``; closes the page, and the browser when ``exe`` is a launcher
    path (a Browser from :func:`launched` stays open)."""
    with contextlib.ExitStack() as stack:
        browser = stack.enter_context(launched(exe)) if isinstance(exe, str) else exe
        page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
        stack.callback(page.close)
        page.goto(url, wait_until="domcontentloaded", timeout=60_000)
        yield page


@contextlib.contextmanager
def served_page(demo, port: int, exe, viewport: tuple[int, int] = (1400, 1000), close_demo: bool = True):
    """A headless Chromium page opened on the launched ``demo`` at ``port`` (:func:`browser_page`); closes the
    demo afterwards unless ``close_demo`` is False."""
    try:
        with browser_page(f"http://127.0.0.1:{port}/", exe, viewport) as page:
            yield page
    finally:
        if close_demo:
            demo.close()


def _without_realtime(exe: str) -> str:
    """A launcher for ``exe`` that cannot raise thread priorities.

    Run as root, Chromium moves some of its threads to real-time scheduling; if they spin, they
    starve every other process of a small machine (seen: three threads holding both cores for
    30 minutes, immune to SIGKILL until demoted). Without CAP_SYS_NICE those requests fail and
    Chromium keeps normal priorities.
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None or os.geteuid() != 0:
        return exe
    launcher = Path(tempfile.gettempdir()) / "specvlm-chromium-normal-priority.sh"
    launcher.write_text(f'#!/bin/sh\nexec "{setpriv}" --bounding-set=-sys_nice --inh-caps=-sys_nice "{exe}" "$@"\n')
    launcher.chmod(0o755)
    return str(launcher)


def set_slider(page, elem_id: str, value: int) -> None:
    """Type a value into a gr.Slider's number box (the settings accordion is opened first)."""
    box = page.locator(f"#{elem_id} input[type=number]")
    if not box.is_visible():
        page.locator("#settings").get_by_text("Settings").first.click()
    box.fill(str(value))
    box.press("Enter")
    # the slider's own state follows the box a moment later; a Run clicked before it would send the old value
    track, end = page.locator(f"#{elem_id} input[type=range]"), time.monotonic() + 5.0
    while track.count() and track.first.input_value() != str(value) and time.monotonic() < end:
        time.sleep(0.05)   # a value out of range is clamped: then this gives up after 5 s, not fails


STATUS_LOG_JS = """() => {
  window.__statuses = [];
  new MutationObserver(() => {
    const s = document.querySelector('#status .prose') || document.getElementById('status');
    const t = s ? s.innerText.trim() : '';  // the Markdown's text, not the progress timer beside it
    if (t && window.__statuses[window.__statuses.length - 1] !== t) window.__statuses.push(t);
  }).observe(document.body, {childList: true, subtree: true, characterData: true});
}"""
"""Records every distinct status line the page shows, in order."""


STATUS_TIMES_JS = """() => {
  window.__statusTimes = [];
  new MutationObserver(() => {
    const s = document.querySelector('#status .prose') || document.getElementById('status');
    const t = s ? s.innerText.trim() : '';
    const log = window.__statusTimes;
    if (t && (!log.length || log[log.length - 1][1] !== t)) log.push([performance.now() / 1000, t]);
  }).observe(document.body, {childList: true, subtree: true, characterData: true});
}"""
"""Records every distinct status line the page shows with the page's clock (seconds) when it appeared."""


def wait_until(cond, timeout_s: float = 30.0) -> None:
    """Poll ``cond()`` until it is true; fails after ``timeout_s`` seconds."""
    end = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def assert_order(seen: list[str], *prefixes: str) -> None:
    """Each prefix is seen, in this order."""
    at = 0
    for p in prefixes:
        hits = [i for i, s in enumerate(seen) if i >= at and s.startswith(p)]
        assert hits, (p, seen)
        at = hits[0]
