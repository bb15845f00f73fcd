"""The page in a headless Chromium for the README's screenshots: the app over the bundled pairs on this machine's
CPU, one example run to Done (:func:`example_run`).

Needs the ``playwright`` Python package and a ``chromium`` executable (the Debian package), as the browser tests
do.
"""
from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from typing import Any

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
"""Chromium flags for a headless page in a container."""


def chromium() -> str | None:
    """The Chromium executable on PATH, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


@contextlib.contextmanager
def example_run(exe: str, port: int, width: int, label: str, timeout_ms: int) -> Iterator[Any]:
    """Serve the app on ``port``, open it ``width`` px wide, click the example whose text is ``label``, press Run
    and yield the playwright page once the status says Done; close the browser and the server afterwards."""
    from playwright.sync_api import sync_playwright

    from app.page.ui import build_demo
    from app.runs.backend import Backend
    from app.runs.facade import SpecvlmFacade

    demo = build_demo(Backend(SpecvlmFacade(), device="cpu", dtype="float32"))
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": width, "height": 1000})
                page.goto(f"http://127.0.0.1:{port}/", wait_until="domcontentloaded", timeout=60_000)
                page.locator("#run").wait_for(timeout=60_000)
                page.locator("#examples").get_by_text(label).first.click()
                page.locator("#video video").wait_for(state="attached", timeout=60_000)
                page.wait_for_timeout(2000)                     # the example's settings follow the row
                page.locator("#run").click()
                page.locator("#status").get_by_text("Done").wait_for(timeout=timeout_ms)
                yield page
            finally:
                browser.close()
    finally:
        demo.close()
