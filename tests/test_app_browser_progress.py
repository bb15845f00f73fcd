"""Real browser (Debian ``chromium`` via the ``playwright`` package) on ``python app.py`` in its own process, as a
user starts it, with the bundled model: through a 256-frame Run the status line changes at least every
:data:`MAX_GAP_S` while the video is read and both prefills run (a part of the work done, or the seconds of the
part that runs), the parts it counts go up in order, and Stop ends the Run inside the speculative prefill."""
from __future__ import annotations

import re

from helpers.browser import STATUS_TIMES_JS, browser_page, chromium, set_slider, wait_until
from helpers.served import app_process

MAX_GAP_S = 3.0
"""Longest time the status line may stand still during the long blocking work."""
PART = re.compile(r"^Prefill \+ pruning \(.*\): part (\d+) of (\d+)")
VANILLA = re.compile(r"^Prefill \(vanilla\)… 256 frames: part (\d+) of (\d+)")


def _gaps(log: list[list]) -> list[tuple[float, str]]:
    """(seconds since the status before, status) of each change of the recorded ``[time, text]`` log."""
    return [(round(b[0] - a[0], 2), b[1][:90]) for a, b in zip(log, log[1:])]


def test_status_moves_every_few_seconds_through_a_256_frame_run(tmp_path):
    """world.mp4 (gradio's bundled 30 s clip) at 256 frames, 1 new token: ~22k video tokens per prefill. The Run is
    stopped a dozen parts into the speculative prefill (past both vision towers), which ends it."""
    exe = chromium()
    from gradio.media import get_video
    with app_process(tmp_path) as (url, _, _), browser_page(url, exe) as page:
        page.locator("#run").wait_for(timeout=60_000)
        page.locator("#video input[type=file]").set_input_files(get_video("world.mp4"))
        page.locator("#video video").wait_for(state="attached", timeout=60_000)
        set_slider(page, "frames", 256)
        set_slider(page, "max-new-tokens", 1)
        wait_until(lambda: page.locator("#frames input[type=number]").input_value() == "256")
        page.evaluate(STATUS_TIMES_JS)
        page.locator("#run").click()
        page.wait_for_function("() => (window.__statusTimes || []).some(([, t]) => "
                               "/^Prefill \\+ pruning .*: part (1[2-9]|[2-9]\\d) of/.test(t))", timeout=600_000)
        page.locator("#stop").click()
        page.wait_for_function("() => (window.__statusTimes || []).some(([, t]) => t.startsWith('Stopped'))",
                               timeout=120_000)
        log = page.evaluate("() => window.__statusTimes")
    texts = [t for _, t in log]
    first = next(i for i, t in enumerate(texts) if t.startswith("Decoding video frames"))
    stop = next(i for i, t in enumerate(texts) if t.startswith("Stopping"))
    gaps = _gaps(log[first:stop])                          # reading, both prefills and the decoding between them
    print("status gaps (s) through the run:", *_gaps(log), sep="\n  ")
    assert max(g for g, _ in gaps) <= MAX_GAP_S, gaps
    vanilla = [tuple(map(int, m.groups())) for m in map(VANILLA.match, texts[first:stop]) if m]
    spec = [tuple(map(int, m.groups())) for m in map(PART.match, texts[first:stop]) if m]
    for parts in (vanilla, spec):
        done = [d for d, _ in parts]
        assert parts and done == sorted(done) and parts[-1][1] > 20   # the parts, chunks included, in order
    assert vanilla[-1][0] > 30 and spec[-1][0] >= 12
    assert any(re.search(r" · \d+ s", t) for t in texts[first:stop])   # the seconds moved between parts
