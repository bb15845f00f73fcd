"""Real browser (Debian ``chromium`` via the ``playwright`` package): the live charts and the progress keep up.

Through "Watch it stream" (512 tokens, fixed length) the page logs every change of the SpecVLM stats, both charts
and the status line. While SpecVLM decodes, the accepted-length chart shows its verify steps and the
tokens-over-time chart both runs while the panel still grows, and the charts keep changing (the server's cadence,
twice a second, is held in ``tests/test_app_charts.py``; the browser draws them as fast as the machine allows); the
status line's progress bar always names the same phase and count as the words beside it, and Gradio's own progress
overlay (a channel of its own, which ran a batch ahead) is hidden while that bar is shown.
"""
from __future__ import annotations

import re

from helpers.browser import chromium, served_page
from helpers.fakes import FakeEngine, free_port

STEP_S = 0.02
"""The fake's seconds per step: SpecVLM's ~170 verify steps of the 512 tokens take 3 s and more."""
MAX_CHART_GAP_S = 3.0
"""Longest time the charts may stand still on the page while SpecVLM decodes. The server sends them with the first
verify step and then every 0.4 s (``tests/test_app_charts.py`` holds it to twice a second); how fast the browser
draws them depends on the machine: on a shared 2-core machine under load the page changed about once a second, the
charts about every 1-2 s."""
MIN_CHART_CHANGES = 3
"""Chart changes the page must show while SpecVLM decodes (besides the first)."""

LOG_JS = """() => {
  window.__log = [];
  const q = (s) => document.querySelector(s);
  const read = () => {
    const bar = q('#status .specvlm-progress');
    const tracker = q('#status [data-testid="status-tracker"]');
    const prose = q('#status .prose');
    return [(q('#spec-stats') || {}).innerText || '', document.querySelectorAll('#accept-plot .bars path').length,
            document.querySelectorAll('#time-plot .scatterlayer .trace').length,
            ((q('#accept-plot .gtitle') || {}).textContent) || '', prose ? prose.innerText.split('\\n')[0] : '',
            bar ? bar.getAttribute('title') : null,
            tracker && getComputedStyle(tracker).display !== 'none' ? tracker.innerText.trim() : ''];
  };
  new MutationObserver(() => {
    const row = read(), log = window.__log, last = log.length ? log[log.length - 1] : null;
    if (!last || JSON.stringify(last.slice(1)) !== JSON.stringify(row)) log.push([performance.now() / 1000, ...row]);
  }).observe(document.body, {childList: true, subtree: true, characterData: true, attributes: true});
}"""


def test_charts_and_progress_keep_up_while_specvlm_decodes():
    exe = chromium()
    from app.page.ui import build_demo
    from app.runs.backend import Backend
    demo = build_demo(Backend(FakeEngine(step_s=STEP_S)))   # the default examples: "Watch it stream" among them
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    with served_page(demo, port, exe, viewport=(1280, 900)) as page:
        page.locator("#run").wait_for(timeout=60_000)
        page.locator("#examples").get_by_text("Watch it stream").first.click()
        page.locator("#video video").wait_for(state="attached", timeout=60_000)
        page.locator("#fixed-length-note").wait_for(timeout=30_000)
        page.evaluate(LOG_JS)
        page.locator("#run").click()
        page.locator("#status").get_by_text("Done").wait_for(timeout=240_000)
        log = page.evaluate("() => window.__log")
    rows = [dict(zip(("t", "spec", "bars", "traces", "title", "status", "bar", "overlay"), r)) for r in log]
    decoding = [r for r in rows if "· decoding ·" in r["spec"]]
    assert decoding, rows[-5:]
    tokens = lambda r: int(re.search(r"(\d+) tokens", r["spec"])[1])  # noqa: E731
    growing = [r for r in decoding if tokens(r) < 512 and r["bars"] > 0 and r["traces"] == 2 and "τ =" in r["title"]]
    assert growing, decoding[-3:]                              # verify steps charted while the panel grows
    assert len({tokens(r) for r in growing}) >= 2               # ... at more than one moment
    start, end = decoding[0]["t"], decoding[-1]["t"]
    changes = [r["t"] for a, r in zip(rows, rows[1:]) if start <= r["t"] <= end and r["bars"] != a["bars"]]
    gaps = [b - a for a, b in zip([start, *changes], [*changes, end])]
    panel = [r["t"] for a, r in zip(rows, rows[1:]) if start <= r["t"] <= end and r["spec"] != a["spec"]]
    print(f"SpecVLM decoding {end - start:.2f} s, chart changes {len(changes)}, gaps {[round(g, 2) for g in gaps]}, "
          f"panel changes {len(panel)}")
    assert end - start >= 1.5 and len(changes) >= MIN_CHART_CHANGES, (end - start, changes)
    assert max(gaps) <= MAX_CHART_GAP_S, gaps
    barred = [r for r in rows if r["bar"] is not None]
    assert len(barred) > 20
    for r in barred:                                           # the bar and the words: one phase, one count
        if "decoding:" in r["status"]:
            assert r["bar"] == r["status"], r
        else:
            assert r["bar"].split(":")[0].split(" (")[0].lower()[:7] in r["status"].lower() or \
                r["status"].startswith(("Both runs finished", "Vanilla finished", "SpecVLM finished")), r
        assert r["overlay"] == "", r                           # Gradio's overlay is hidden meanwhile
