"""Real browser (Debian ``chromium`` via the ``playwright`` package): the first screen and the frame galleries.

At 1280x900 and 800x900, light and dark, the first screen (no scrolling) holds the one-sentence description, the
examples, the video, the prompt, the preset and Run; the formats, limits, subtitles, ground truth, custom model and
settings open from collapsed sections under them. "200 MB" in the limits renders in one font. Inspect's Stage I /
Stage II gallery shows every frame of a 16-group run inside its box at 800 and 1280 px, each caption under its
thumbnail; the re-selection slider's label keeps its words on at most two lines. Screenshots go to ``artifacts/``
(git-ignored).
"""
from __future__ import annotations

import pytest

from helpers.browser import chromium, launched
from helpers.clip_record import GROUPS, clip_record
from helpers.fakes import ROOT, FakeEngine, free_port

from app.page.layout import MORE_INPUTS

FIRST_SCREEN = ("#intro", "#video", "#prompt", "#preset", "#examples", "#run")
"""What the first screen must hold, whole."""
BOXES_JS = """(sels) => sels.map((s) => { const e = document.querySelector(s); if (!e) return [s, null, null];
  const r = e.getBoundingClientRect(); return [s, Math.round(r.top), Math.round(r.bottom)]; })"""
GALLERY_JS = """() => {
  const g = document.querySelector('#specvlm-inspect-maps'), box = g.getBoundingClientRect();
  const grid = g.querySelector('.grid-container');
  return {box: [box.left, box.right], overflow: grid.scrollWidth - grid.clientWidth,
    items: [...g.querySelectorAll('.thumbnail-item')].map((t) => {
      const r = t.getBoundingClientRect(), i = t.querySelector('img').getBoundingClientRect();
      const c = t.querySelector('.caption-label').getBoundingClientRect();
      return {left: r.left, right: r.right, imgBottom: i.bottom, imgHeight: i.height, capTop: c.top,
              capHeight: c.height}; })};
}"""
LABEL_LINES_JS = """(text) => {
  const walker = document.createTreeWalker(document.querySelector('#settings'), NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (n.textContent.trim() !== text) continue;
    const r = document.createRange(); r.selectNodeContents(n);
    return new Set([...r.getClientRects()].filter((x) => x.width > 0).map((x) => Math.round(x.top))).size;
  }
  return null;
}"""


@pytest.fixture(scope="module")
def chrome():
    with launched(chromium()) as browser:
        yield browser


@pytest.fixture(scope="module")
def real_page():
    """The page over the real engine's presets and the default examples (nothing runs), as users first meet it."""
    from app.page.ui import build_demo
    from app.runs.backend import Backend
    from app.runs.facade import SpecvlmFacade
    demo = build_demo(Backend(SpecvlmFacade(), device="cpu", dtype="float32"))
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    yield port
    demo.close()


def _open(browser, port: int, size: tuple[int, int], theme: str = "light", examples: bool = True):
    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
    page.goto(f"http://127.0.0.1:{port}/?__theme={theme}", wait_until="domcontentloaded", timeout=60_000)
    page.locator("#run").wait_for(timeout=60_000)
    if examples:
        page.locator("#examples button").first.wait_for(timeout=60_000)
    return page


def _shot(page, name: str) -> None:
    shot = ROOT / "artifacts" / name
    shot.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(shot))


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("size", [(1280, 900), (800, 900)])
def test_the_first_screen_invites_a_run(chrome, real_page, size, theme):
    page = _open(chrome, real_page, size, theme)
    try:
        page.wait_for_timeout(500)                                          # fonts and layout settle
        boxes = page.evaluate(BOXES_JS, list(FIRST_SCREEN))
        intro = page.locator("#intro").inner_text()
        _shot(page, f"app_first_screen_{size[0]}_{theme}.png")
        assert (theme == "dark") == page.evaluate("() => document.body.classList.contains('dark')")
        for box, label in (("#more-inputs", MORE_INPUTS), ("#custom-model-box", "Custom model"),
                           ("#settings", "Settings")):                      # the rest opens from under them
            page.locator(box).get_by_text(label).first.click()
        for sel in ("#video-formats", "#limits", "#srt", "#subtitle-mode", "#truth", "#custom-model", "#frames"):
            page.locator(sel).first.wait_for(state="visible", timeout=10_000)
        limits = page.locator("#limits").inner_text()
        bold = _fonts(page, "#limits strong")
        more = page.evaluate(BOXES_JS, ["#srt"])[0]
    finally:
        page.close()
    for sel, top, bottom in boxes:
        assert top is not None and 0 <= top and bottom <= size[1], (sel, top, bottom, boxes)   # whole, unscrolled
    title, sentence = [ln for ln in intro.splitlines() if ln.strip()]
    assert title == "SpecVLM Studio" and sentence.count(". ") == 0 and sentence.endswith(".")  # one sentence
    assert "Vanilla" in sentence and "SpecVLM" in sentence
    assert more[2] > [b for s, _, b in boxes if s == "#run"][0] or more[1] > 0      # subtitles sit below, collapsed
    assert "200 MB" in limits and len(bold) == 1, bold                   # one font for "200 MB" and "10 min"


def _fonts(page, selector: str) -> list[str]:
    """Fonts Chromium drew the first element matching ``selector`` with (DevTools: platform fonts for its node)."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("DOM.enable")
    cdp.send("CSS.enable")
    root = cdp.send("DOM.getDocument", {"depth": -1})["root"]["nodeId"]
    node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
    return [f["familyName"] for f in cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]]


@pytest.mark.parametrize("width", [800, 1280])
def test_inspect_shows_every_frame_with_captions_under_the_thumbnails(chrome, tmp_path, width):
    from app.page.ui import build_demo
    from app.runs.backend import Backend
    from specvlm.analysis.records import save_json
    path = save_json(clip_record(), str(tmp_path / "run.json"))
    demo = build_demo(Backend(FakeEngine()), examples=[])
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    page = _open(chrome, port, (width, 900), examples=False)
    try:
        page.locator("#settings").get_by_text("Settings").first.click()
        page.locator("#reselect-min-share").wait_for(state="visible", timeout=10_000)
        label_lines = page.evaluate(LABEL_LINES_JS, "Re-select above this unseen share")
        page.get_by_role("tab", name="Inspect").click()
        page.locator("#specvlm-inspect-upload input[type=file]").set_input_files(path)
        page.locator("#specvlm-inspect-maps .thumbnail-item img").nth(GROUPS - 1).wait_for(timeout=60_000)
        page.wait_for_function("() => [...document.querySelectorAll('#specvlm-inspect-maps img')]"
                               ".every((i) => i.complete && i.naturalWidth > 0)", timeout=30_000)
        seen = page.evaluate(GALLERY_JS)
        page.locator("#specvlm-inspect-maps").scroll_into_view_if_needed()
        _shot(page, f"app_inspect_maps_{width}.png")
    finally:
        page.close()
        demo.close()
    left, right = seen["box"]
    items = seen["items"]
    assert len(items) == GROUPS and seen["overflow"] <= 1, seen                     # every frame group, no overflow
    assert all(left - 1 <= it["left"] and it["right"] <= right + 1 for it in items), (seen["box"], items)
    assert all(it["imgHeight"] > 20 and it["capTop"] >= it["imgBottom"] - 1 and it["capHeight"] > 0
               for it in items), items                                              # captions under, not over
    assert label_lines is not None and label_lines <= 2, label_lines               # no word-per-line label


def test_an_example_with_subtitles_names_them_on_the_closed_section(chrome, real_page):
    from app.page.examples import FAILURE_CLIP, FAILURE_LABEL
    page = _open(chrome, real_page, (1280, 900))
    try:
        page.locator("#examples").get_by_text(FAILURE_LABEL).first.click()
        srt = FAILURE_CLIP.replace(".mp4", ".srt")
        page.locator("#more-inputs").get_by_text(f"subtitles: {srt}").first.wait_for(timeout=60_000)
        run = page.evaluate(BOXES_JS, ["#run"])[0]
    finally:
        page.close()
    assert run[2] <= 900, run                                   # Run stays in the first screen
