#!/usr/bin/env python
"""Screenshot of the app's failure case for docs/app.md: subtitles withheld from the draft, the Inspect tab's why.

Starts the app, clicks the failure-case example (``shapes_subtitles`` with its ``.srt``, the bundled sparse
target drafting for itself, subtitles to the target only: :func:`app.page.examples.failure_example`), presses
Run, opens the Inspect tab and clicks through the lowest-acceptance steps until the step's explanation is the
withheld transcript with the subtitle cue holding its word; then saves a screenshot of the page (default
``docs/failure_case.png``) and prints the step's explanation.

The browser session: :mod:`scripts.shots` (needs ``playwright`` and ``chromium``).

Example:
    python -m scripts.failure_case_shot --out docs/failure_case.png
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scripts.shots import chromium, example_run
from specvlm import assets


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="docs/failure_case.png")
    ap.add_argument("--port", type=int, default=7871)
    args = ap.parse_args(argv)
    from app.page.examples import FAILURE_LABEL, failure_example

    exe = chromium()
    if exe is None or not failure_example():
        print(f"error: needs chromium on PATH and the failure-case example ({assets.path('videos')}/"
              f"shapes_subtitles.mp4 and .srt, {assets.path('model_sparse')})", file=sys.stderr)
        return 2
    found = ""
    with example_run(exe, args.port, 1400, FAILURE_LABEL, 600_000) as page:
        page.get_by_role("tab", name="Inspect").click()
        cell = '#specvlm-inspect-table [role=row][data-index="{}"] [role=gridcell]'
        page.locator(cell.format(0)).first.wait_for(timeout=60_000)
        for i in range(10):
            if page.locator(cell.format(i)).count() == 0:
                break
            page.locator(cell.format(i)).first.click()
            page.wait_for_timeout(1500)
            text = page.locator("#specvlm-inspect-why").inner_text()
            if "withheld transcript" in text and "The word is in the cue" in text:
                found = text
                break
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=args.out, full_page=True)
    print(found or "no explained step names the withheld transcript and its cue (screenshot of the last step tried)")
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
