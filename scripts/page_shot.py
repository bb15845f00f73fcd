#!/usr/bin/env python
"""Screenshot of the app's Compare tab for the README: the first example (the streaming one) after a Run.

Starts the app over the bundled default pair, opens the page at 1280 px in Chromium, clicks the first example,
presses Run, waits until the status says Done and the charts are drawn, then saves a full-page screenshot
(default ``docs/screenshot.png``).

The browser session: :mod:`scripts.shots` (needs ``playwright`` and ``chromium``).

Example:
    python -m scripts.page_shot --out docs/screenshot.png
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scripts.shots import chromium, example_run


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="docs/screenshot.png")
    ap.add_argument("--port", type=int, default=7872)
    ap.add_argument("--width", type=int, default=1280, help="viewport width in px")
    args = ap.parse_args(argv)
    exe = chromium()
    if exe is None:
        print("error: needs chromium on PATH", file=sys.stderr)
        return 2
    from app.inputs.settings import Limits
    from app.page.examples import default_examples

    first = default_examples(Limits().max_new_tokens)[1][0]   # the streaming example's label
    with example_run(exe, args.port, args.width, first, 900_000) as page:
        page.locator("#accept-plot .bars path").first.wait_for(timeout=60_000)
        page.wait_for_timeout(1500)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=args.out, full_page=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
