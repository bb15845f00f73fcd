"""Real browser (Debian ``chromium`` via the ``playwright`` package): the page as users meet it.

The streaming example's text panels keep their newest text in view while it streams (and stay where a
user scrolled up to); in dark mode (``?__theme=dark``) no text in Compare or Inspect has (nearly) its
background's colour, charts and the draft tree included; at 800 px wide no chart title is cut or
covered by its legend, no Inspect table header wraps inside a word and its last column is on screen.
Screenshots go to ``artifacts/`` (git-ignored).
"""
from __future__ import annotations

import time

import pytest

from helpers.browser import chromium, launched, served_page, set_slider
from helpers.fakes import ROOT, FakeEngine, free_port, sample_video
from helpers.records import cut_record

MIN_CONTRAST = 2.0
"""Least contrast ratio (WCAG formula; 1 = the same colour) of any visible text against its background."""
FOLLOW_PX = 30
"""A panel whose end is within this many pixels of its visible bottom shows its newest text."""

CONTRAST_JS = """
(root) => {
  const parse = (c) => {
    const m = /rgba?\\(([^)]+)\\)/.exec(c || '');
    if (!m) return null;
    const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, base) => [0, 1, 2].map((i) => top[i] * top[3] + base[i] * (1 - top[3])).concat([1]);
  const background = (el) => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0) { layers.push(c); if (c[3] >= 0.99) break; }
    }
    let bg = [255, 255, 255, 1];
    for (let i = layers.length - 1; i >= 0; i--) bg = over(layers[i], bg);
    return bg;
  };
  const lum = (c) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const out = [];
  const scope = document.querySelector(root);
  for (const el of scope.querySelectorAll('*')) {
    const own = Array.from(el.childNodes).filter((n) => n.nodeType === 3 && n.textContent.trim()).length;
    if (!own) continue;
    const r = el.getBoundingClientRect();
    const st = getComputedStyle(el);
    if (r.width === 0 || r.height === 0 || st.visibility === 'hidden' || st.display === 'none') continue;
    const svg = el instanceof SVGElement;
    const fg = parse(svg ? st.fill : st.color);
    if (!fg || fg[3] === 0) continue;
    const bg = background(el);
    const a = lum(over(fg, bg)), b = lum(bg);
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    out.push({text: el.textContent.trim().slice(0, 40), tag: el.tagName, fg: svg ? st.fill : st.color,
              bg: 'rgb(' + bg.slice(0, 3).map(Math.round).join(',') + ')', ratio: Math.round(ratio * 100) / 100});
  }
  return out;
}
"""
"""Every visible element with its own text under ``root``: its text, colour (SVG: fill), the background it
sits on (the ancestors' background colours composited) and their contrast ratio."""

LAYOUT_JS = """
() => {
  const box = (e) => e.getBoundingClientRect();
  const hit = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
  const charts = [];
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const p = box(plot);
    if (p.width === 0) continue;
    const title = plot.querySelector('.gtitle');
    const t = title ? box(title) : null;
    const block = plot.closest('.block') || plot;
    const others = [...plot.querySelectorAll('.legend, .g-xtitle, .xtick text'),
                    ...block.querySelectorAll('[data-testid="block-label"], label')];   // + the block's label
    charts.push({title: title ? title.textContent : null, width: p.width,
                 cut: !t || t.left < p.left - 1 || t.right > p.right + 1 || t.top < p.top - 1,
                 overlaps: !!t && others.some((o) => box(o).width > 0 && hit(t, box(o))),
                 legendOverAxis: [...plot.querySelectorAll('.legend')].some((l) =>
                     [...plot.querySelectorAll('.g-xtitle')].some((x) => hit(box(l), box(x))))});
  }
  const headers = [];
  for (const th of document.querySelectorAll('#specvlm-inspect-table th')) {
    const walker = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
    let broken = false, text = '';
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      text += n.textContent;
      const re = /\\S+/g;
      for (let m = re.exec(n.textContent); m; m = re.exec(n.textContent)) {
        const r = document.createRange();
        r.setStart(n, m.index);
        r.setEnd(n, m.index + m[0].length);
        const tops = new Set(Array.from(r.getClientRects()).filter((x) => x.width > 0).map((x) => Math.round(x.top)));
        if (tops.size > 1) broken = true;   // the word's letters sit on more than one line
      }
    }
    const b = box(th);
    headers.push({text: text.trim(), broken, right: b.right, left: b.left, width: b.width});
  }
  const captions = [...document.querySelectorAll(
      ':is(#heatmaps, #specvlm-inspect-why-maps, #specvlm-inspect-maps) .caption-label')]
    .filter((c) => box(c).width > 0)
    .map((c) => ({text: c.textContent.trim(), cut: c.scrollWidth > c.clientWidth + 1}));
  return {charts, headers, captions, viewport: window.innerWidth};
}
"""
"""Chart titles (cut at the chart's edges? overlapping its legend?), the Inspect table's headers (a word
split over lines? where on screen?) and the frame maps' captions (cut?)."""


def _serve(engine: FakeEngine, examples: list | None = None):
    from app.page.ui import build_demo
    from app.runs.backend import Backend
    demo = build_demo(Backend(engine), examples=examples)
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    return demo, port


@pytest.fixture(scope="module")
def chrome():
    """One Chromium for this module's pages."""
    with launched(chromium()) as browser:
        yield browser


@pytest.fixture(scope="module")
def instant():
    """(demo, port): one server over the instant fake engine for the tests that run it and read the page (each
    page is its own session)."""
    demo, port = _serve(FakeEngine(step_s=0.0), examples=[])
    yield demo, port
    demo.close()


def _run_fake(page, tokens: int = 60) -> None:
    """Upload the sample clip, set the token budget and run to Done."""
    page.locator("#run").wait_for(timeout=60_000)
    page.locator("#video input[type=file]").set_input_files(str(sample_video()))
    page.locator("#video video").wait_for(state="attached", timeout=60_000)
    set_slider(page, "max-new-tokens", tokens)
    page.locator("#run").click()
    page.locator("#status").get_by_text("Done").wait_for(timeout=120_000)
    page.locator("#accept-plot .js-plotly-plot .gtitle").first.wait_for(timeout=30_000)


def _replay(page, tmp_path) -> None:
    """Open Inspect, replay a run with draft trees and show step 2's tree."""
    from specvlm.analysis.records import save_json
    path = tmp_path / "run.json"
    save_json(cut_record([17, 18, 14, 15]), str(path))
    page.get_by_role("tab", name="Inspect").click()
    page.locator("#specvlm-inspect-upload input[type=file]").set_input_files(str(path))
    page.locator("#specvlm-inspect-table th").first.wait_for(timeout=60_000)
    box = page.locator("#specvlm-inspect-step input")
    box.fill("2")
    box.press("Enter")
    page.locator("#specvlm-inspect-tree .tree-node").first.wait_for(timeout=30_000)
    page.locator("#specvlm-inspect-chart .js-plotly-plot .gtitle").first.wait_for(timeout=30_000)


def _shot(page, name: str, full_page: bool = True) -> None:
    shot = ROOT / "artifacts" / name
    shot.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(shot), full_page=full_page)


PANEL = "#vanilla-text .specvlm-tokens"
GAP_JS = f"""() => {{ const e = document.querySelector('{PANEL}');
  return e ? [e.scrollHeight - e.clientHeight - e.scrollTop, e.scrollTop, e.scrollHeight, e.clientHeight] : null; }}"""


def _samples(page, seconds: float, least: int = 2) -> list[list[float]]:
    """(gap to the end, scrollTop, scrollHeight, clientHeight) of the vanilla panel every 0.2 s while it overflows,
    for ``seconds`` and until ``least`` samples are taken (a busy machine reads the page more slowly), 60 s at most."""
    out, start = [], time.monotonic()
    while (time.monotonic() < start + seconds or len(out) < least) and time.monotonic() < start + 60:
        g = page.evaluate(GAP_JS)
        if g and g[2] > g[3] + 40:
            out.append(g)
        page.wait_for_timeout(200)
    return out


def test_the_streaming_example_keeps_its_newest_text_in_view(chrome):
    """Run the streaming example (fixed length): while vanilla streams, its panel stays scrolled to its end;
    scrolled up by the user it stays there while text arrives; scrolled back down it follows again."""
    demo, port = _serve(FakeEngine(step_s=0.04))          # 512 tokens: ~20 s of vanilla decoding
    with served_page(demo, port, chrome, viewport=(1000, 900)) as page:
        page.locator("#run").wait_for(timeout=60_000)
        page.locator("#examples").get_by_text("Watch it stream").first.click()
        page.locator("#video video").wait_for(state="attached", timeout=60_000)   # the example is loaded
        page.locator("#fixed-length-note").wait_for(timeout=30_000)
        page.locator("#run").click()
        page.locator("#vanilla-stats").get_by_text("decoding").wait_for(timeout=90_000)
        try:
            page.wait_for_function(f"() => {{ const g = ({GAP_JS})(); return g && g[2] > g[3] + 40; }}",
                                   timeout=90_000)                        # the text overflows its panel
        except Exception as e:  # noqa: BLE001 - say where the run was
            raise AssertionError((page.locator("#status").inner_text(), page.locator("#vanilla-stats").inner_text(),
                                  page.evaluate(GAP_JS))) from e
        following = _samples(page, 3.0, least=4)
        assert len(following) >= 4, following
        assert all(g[0] <= FOLLOW_PX for g in following), following       # the newest line is in view
        assert following[-1][2] > following[0][2]                           # while the text grew
        _shot(page, "app_streaming_follows.png")
        page.locator(PANEL).hover()
        page.mouse.wheel(0, -100_000)                                        # the user scrolls up to read
        page.wait_for_timeout(500)
        kept = _samples(page, 1.5)
        assert kept and all(g[1] <= FOLLOW_PX for g in kept), kept          # it stays where they put it
        assert kept[-1][2] > kept[0][2], kept                                # though text kept coming
        page.locator(PANEL).hover()
        page.mouse.wheel(0, 100_000)                                         # back to the end: it follows again
        page.wait_for_timeout(500)
        again = _samples(page, 1.5)
        assert again and all(g[0] <= FOLLOW_PX for g in again), again
        note = page.locator("#fixed-length-note")                            # the page says why the text goes on
        assert note.is_visible() and "chat turns" in note.inner_text()


def test_dark_mode_has_no_text_in_its_background_colour(chrome, instant, tmp_path):
    demo, port = instant
    with served_page(demo, port, chrome, close_demo=False) as page:
        page.goto(f"http://127.0.0.1:{port}/?__theme=dark", wait_until="domcontentloaded", timeout=60_000)
        _run_fake(page)
        assert page.evaluate("() => document.body.classList.contains('dark')")
        compare = page.evaluate(CONTRAST_JS, "#tab-compare")
        _shot(page, "app_dark_compare.png")
        _replay(page, tmp_path)
        inspect = page.evaluate(CONTRAST_JS, "#tab-inspect")
        _shot(page, "app_dark_inspect.png")
    for where, seen in (("Compare", compare), ("Inspect", inspect)):
        texts = " ".join(t["text"] for t in seen)
        svg = [t for t in seen if t["tag"] == "text"]
        assert len(seen) > 20 and svg, (where, len(seen))                    # page text and chart text checked
        bad = [t for t in seen if t["ratio"] < MIN_CONTRAST]
        assert not bad, (where, bad)
        if where == "Inspect":
            assert "(root)" in texts and "p=0.60" in texts                       # the draft tree was checked


def test_at_800_px_titles_are_whole_and_headers_keep_their_words(chrome, instant, tmp_path):
    demo, port = instant
    with served_page(demo, port, chrome, viewport=(800, 1000), close_demo=False) as page:
        _run_fake(page)
        compare = page.evaluate(LAYOUT_JS)
        _shot(page, "app_800_compare.png")
        _replay(page, tmp_path)
        inspect = page.evaluate(LAYOUT_JS)
        _shot(page, "app_800_inspect.png")
    assert compare["viewport"] == 800
    titles = [c for c in compare["charts"] if c["title"]]
    assert len(titles) >= 2 and any("τ =" in c["title"] for c in titles), compare
    assert not [c for c in titles if c["cut"] or c["overlaps"] or c["legendOverAxis"]], titles
    charts = [c for c in inspect["charts"] if c["title"] and "click a bar" in c["title"]]
    assert charts and not [c for c in charts if c["cut"] or c["overlaps"] or c["legendOverAxis"]], inspect["charts"]
    heads = inspect["headers"]
    assert [h["text"].split("⋮")[0].strip() for h in heads][:6] == ["step", "accepted", "tree size", "text before",
                                                                     "emitted", "text after"], heads
    assert not [h for h in heads if h["broken"]], heads                    # no "st/ep"
    last = heads[5]
    assert 0 <= last["left"] and last["right"] <= inspect["viewport"], last   # "text after" on screen
    captions = compare["captions"] + inspect["captions"]
    assert compare["captions"] and not [c for c in captions if c["cut"]], captions   # frame map captions whole


IN_VIEW_JS = """() => ['#status', '#stop', '#run'].map((s) => {
  const r = document.querySelector(s).getBoundingClientRect();
  return [s, Math.round(r.top), Math.round(r.bottom), r.top >= -1 && r.bottom <= innerHeight + 1]; })"""


@pytest.mark.parametrize("size", [(1280, 900), (800, 900)])
def test_progress_and_stop_stay_in_view_through_a_long_prefill(chrome, size):
    """During a slow prefill the status line, Run and Stop are inside the window right after Run, the live
    panels start on screen, and they all stay in view when the user scrolls down to the charts."""
    demo, port = _serve(FakeEngine(step_s=0.0, prefill_s=20.0))       # the default examples: the real layout
    with served_page(demo, port, chrome, viewport=size) as page:
        page.locator("#run").wait_for(timeout=60_000)
        page.locator("#video input[type=file]").set_input_files(str(sample_video()))
        page.locator("#video video").wait_for(state="attached", timeout=60_000)
        page.locator("#run").click()
        page.locator("#status").get_by_text("Prefill (vanilla)").first.wait_for(timeout=60_000)
        at_start = page.evaluate(IN_VIEW_JS)
        panels = page.evaluate("() => document.getElementById('live-panels').getBoundingClientRect().top")
        page.mouse.wheel(0, 1500)                                          # the user looks at the charts
        page.wait_for_timeout(500)
        scrolled = page.evaluate(IN_VIEW_JS)
        moved = page.evaluate("() => window.scrollY")
        _shot(page, f"app_in_view_{size[0]}.png", full_page=False)   # the window the user sees
        page.locator("#stop").click()
        page.locator("#status").get_by_text("Stopped").first.wait_for(timeout=60_000)
    assert all(ok for *_, ok in at_start), at_start
    assert 0 <= panels < size[1] - 150, panels                             # the panels start on screen
    assert moved > 0 and all(ok for *_, ok in scrolled), (moved, scrolled)
