#!/usr/bin/env python
"""Screenshot of the app's Compare tab for the README: the first example (the streaming one) after a Run.

Starts the app over the bundled default pair, opens the page at 1280 px in Chromium, clicks the first example,
presses Run, waits until the status says Done and the charts are drawn, then saves a full-page screenshot
(default ``docs/screenshot.png``).

Needs the ``playwright`` Python package and a ``chromium`` executable (the Debian package), as the browser
tests do.

Example:
    python -m scripts.page_shot --out docs/screenshot.png
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from scripts.failure_case_shot import CHROMIUM_ARGS


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="docs/screenshot.png")
    ap.add_argument("--port", type=int, default=7872)
    ap.add_argument("--width", type=int, default=1280, help="viewport width in px")
    args = ap.parse_args(argv)
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        print("error: needs chromium on PATH", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    from app.page.examples import default_examples
    from app.page.ui import build_demo
    from app.runs.backend import Backend
    from app.runs.facade import SpecvlmFacade

    backend = Backend(SpecvlmFacade(), device="cpu", dtype="float32")
    first = default_examples(backend.limits.max_new_tokens)[1][0]
    demo = build_demo(backend)
    demo.queue().launch(server_name="127.0.0.1", server_port=args.port, prevent_thread_lock=True, quiet=True)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": args.width, "height": 1000})
                page.goto(f"http://127.0.0.1:{args.port}/", wait_until="domcontentloaded", timeout=60_000)
                page.locator("#run").wait_for(timeout=60_000)
                page.locator("#examples").get_by_text(first).first.click()
                page.locator("#video video").wait_for(state="attached", timeout=60_000)
                page.wait_for_timeout(2000)                     # the example's settings follow the row
                page.locator("#run").click()
                page.locator("#status").get_by_text("Done").wait_for(timeout=900_000)
                page.locator("#accept-plot .bars path").first.wait_for(timeout=60_000)
                page.wait_for_timeout(1500)
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=args.out, full_page=True)
            finally:
                browser.close()
    finally:
        demo.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
