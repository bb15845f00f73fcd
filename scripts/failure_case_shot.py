#!/usr/bin/env python
"""Screenshot of the app's failure case for the README: subtitles withheld from the draft, the Inspect tab's why.

Starts the app on the bundled pair, uploads a clip and its ``.srt`` (default: the ``shapes_subtitles``
example), sends the subtitles to the target only, presses Run, opens the Inspect tab and clicks through
the lowest-acceptance steps until the step's explanation names a subtitle cue the draft did not get; then
saves a screenshot of the page (default ``docs/failure_case.png``) and prints the step's explanation.

Needs the ``playwright`` Python package and a ``chromium`` executable (the Debian package), as the browser
tests do.

Example:
    python -m scripts.failure_case_shot --out docs/failure_case.png
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from specvlm import assets

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--video", default=str(assets.path("videos", "shapes_subtitles.mp4")))
    ap.add_argument("--srt", default=None, help="subtitles (default: the video's .srt)")
    ap.add_argument("--out", default="docs/failure_case.png")
    ap.add_argument("--port", type=int, default=7871)
    args = ap.parse_args(argv)
    video, srt = Path(args.video), Path(args.srt) if args.srt else Path(args.video).with_suffix(".srt")
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None or not video.exists() or not srt.exists():
        print(f"error: needs chromium on PATH, {video} and {srt}", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    from app.backend import Backend
    from app.engine import Engine
    from app.ui import build_demo

    demo = build_demo(Backend(Engine(), device="cpu", dtype="float32"))
    demo.queue().launch(server_name="127.0.0.1", server_port=args.port, prevent_thread_lock=True, quiet=True)
    found = ""
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(f"http://127.0.0.1:{args.port}/", wait_until="domcontentloaded", timeout=60_000)
                page.locator("#run").wait_for(timeout=60_000)
                page.locator("#video input[type=file]").set_input_files(str(video))
                page.locator("#video video").wait_for(state="attached", timeout=60_000)
                page.locator("#srt input[type=file]").set_input_files(str(srt))
                page.locator("#subtitle-mode").get_by_text("Target only").click()
                page.locator("#run").click()
                page.locator("#status").get_by_text("Done").wait_for(timeout=600_000)
                page.get_by_role("tab", name="Inspect").click()
                cell = '#specvlm-inspect-table [role=row][data-index="{}"] [role=gridcell]'
                page.locator(cell.format(0)).first.wait_for(timeout=60_000)
                for i in range(10):
                    if page.locator(cell.format(i)).count() == 0:
                        break
                    page.locator(cell.format(i)).first.click()
                    page.wait_for_timeout(1500)
                    text = page.locator("#specvlm-inspect-why").inner_text()
                    if "subtitle cue" in text:
                        found = text
                        break
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=args.out, full_page=True)
            finally:
                browser.close()
    finally:
        demo.close()
    print(found or "no explained step names a withheld subtitle cue (screenshot of the last step tried)")
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
