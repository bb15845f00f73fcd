"""Browser-side hooks of the page (run once on load) and its small style sheet.

* The video box takes every format the reader decodes (:data:`VIDEO_EXTENSIONS`, e.g. GIF, MKV, AVI):
  Gradio's video upload checks the browser's MIME type against ``video/*``, and a GIF is
  ``image/gif``, so such files are handed to it re-typed as ``video/<ext>`` (same bytes).
* The player's "Video not playable" toast is replaced by a note (the server then swaps in an H.264
  preview, :mod:`app.inputs.preview`): a file the browser cannot play (HEVC, GIF) is still read as uploaded.
* Run scrolls the page so its Run / Stop / status bar (``#run-bar``) is at the top of the window with the live
  panels right under it, and turns Stop red at once (class ``specvlm-running``); the run's own updates then keep
  Stop red (``variant="stop"``) until it stops or ends (``app.page.ui``). While a Run works the bar stays at the
  top of the window (``position: sticky``), so its progress and Stop stay in view wherever the user scrolls.
* A second Run click within :data:`DOUBLE_CLICK_MS` of an accepted one is ignored unless Stop or the
  timing repeat was clicked or the server enabled Run again in between (the server disables Run while a run decodes,
  but its first update takes a moment; Run holds clicks made while the previous run stops, so a
  double-click would otherwise run twice).
* The subtitle and ground-truth boxes accept any file (so a wrong one gets a clear message instead of
  Gradio's bare "Error"); their file pickers still offer only ``.srt`` / ``.json``.
* The heatmap captions wrap instead of being cut off.
* The two text panels follow their newest text while it streams (each update replaces the panel's
  content, which would otherwise start again at its top); a panel the user scrolled up in stays
  where the user put it until they scroll back to its end (within :data:`FOLLOW_SLACK_PX`).
* While the status line carries the Run's own progress bar (:mod:`app.views.progress_bar`), Gradio's progress
  overlay on it is hidden: the bar and the words come in one update, the overlay on a channel of its own.
* The race of the two finished runs plays once when it appears and again on *Replay the race*
  (:mod:`app.page.race_js`).
* The charts' titles, legends and axis labels take the page's text colour, so they read in the light
  and the dark theme (``?__theme=dark``) alike (the figures have transparent backgrounds and grey grid
  lines, :func:`app.views.plots.themed`); the Inspect table's headers break between words only.

Source: docs/design.md §1 (the app), §8 (Gradio traps).
"""
from __future__ import annotations

import json

from app.page.race_js import RACE_CSS, RACE_JS

VIDEO_EXTENSIONS = (".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".gif", ".mpg", ".mpeg", ".ts", ".flv",
                    ".wmv", ".3gp", ".ogv")
"""File types the video box accepts: every container the video reader decodes (FFmpeg through PyAV)."""

PAGE_CSS = """
@font-face { font-family: "Source Sans Pro"; font-weight: 700; font-style: normal;
  src: url("static/fonts/SourceSansPro/SourceSansPro-Bold.woff2") format("woff2"); }
:is(#heatmaps, #specvlm-inspect-why-maps, #specvlm-inspect-maps) .grid-container {
  grid-template-columns: repeat(auto-fill, minmax(var(--specvlm-thumb, 120px), 1fr)) !important;
  grid-template-rows: none !important; grid-auto-rows: auto !important; }
#heatmaps { --specvlm-thumb: 200px; }
#specvlm-inspect-why-maps { --specvlm-thumb: 160px; }
:is(#heatmaps, #specvlm-inspect-why-maps, #specvlm-inspect-maps) .grid-wrap { padding-top: 2.2em !important; }
:is(#heatmaps, #specvlm-inspect-why-maps, #specvlm-inspect-maps) .thumbnail-item { aspect-ratio: auto !important;
  height: auto !important; display: flex !important; flex-direction: column; }
:is(#heatmaps, #specvlm-inspect-why-maps, #specvlm-inspect-maps) .thumbnail-item > img { height: auto !important;
  aspect-ratio: auto; object-fit: contain !important; }
:is(#heatmaps, #specvlm-inspect-why-maps, #specvlm-inspect-maps) .caption-label { position: static !important;
  white-space: normal !important; overflow: visible !important; max-width: 100% !important; border: none !important;
  border-top: 1px solid var(--border-color-primary) !important; border-radius: 0 !important;
  text-overflow: clip !important; line-height: 1.25; opacity: 1 !important; }
#preset-info { font-size: var(--text-sm); }
#status:has(.specvlm-progress) [data-testid="status-tracker"] { display: none !important; }
.js-plotly-plot .main-svg :is(.infolayer, .xaxislayer-above, .yaxislayer-above) text {
  fill: var(--body-text-color) !important; }
#specvlm-inspect-table th, #specvlm-inspect-table th * { word-break: normal !important;
  overflow-wrap: normal !important; hyphens: none !important; }
#video-note:empty, #truth-note:empty, #hub-note:empty { display: none; }
.gradio-container { overflow: clip !important; }
#run-bar:has(#stop.specvlm-running, #stop.stop, #run:disabled) { position: sticky; top: 0; z-index: 100;
  background: var(--background-fill-primary); box-shadow: 0 2px 6px rgba(0, 0, 0, 0.2); }
#stop.specvlm-running { background: var(--button-cancel-background-fill); color: var(--button-cancel-text-color);
  border-color: var(--button-cancel-border-color); }
""" + RACE_CSS
"""While a Run works (Stop red, or Run disabled) the Run / Stop / status bar stays at the top of the window, opaque in
either theme (the page's container clips instead of hiding its overflow: a hidden overflow would make it the
scroll box the bar sticks in, and it never scrolls). The frame-map galleries (Compare and Inspect) fill their width
with as many columns as fit (so every frame shows at 800 px) and put each caption under its thumbnail, wrapped: they
name frames, times, shares and kept counts; bold text uses Gradio's bundled bold face (its semibold file covers only
a few letters, so "200 MB" came out in two fonts); the preset's description is small; an empty video note takes no
room; chart text takes the page's text colour (light or dark theme); the Inspect table's headers break between words
only; while the status line carries the Run's own progress bar, Gradio's overlay on it is hidden."""
DOUBLE_CLICK_MS = 1500
"""Run clicks this soon after an accepted one are ignored (milliseconds)."""
FOLLOW_SLACK_PX = 24
"""A text panel scrolled to within this many pixels of its end follows the newest text."""
FOLLOW_PANELS = ("vanilla-text", "spec-text")
"""Element ids of the streaming text panels (``app.page.ui``)."""


def page_js() -> str:
    """The JavaScript function (as ``demo.load(None, js=...)`` runs it) that installs the hooks."""
    return _JS.replace("__RACE__", RACE_JS).replace(
        "__EXTS__", json.dumps([e.lstrip(".") for e in VIDEO_EXTENSIONS])).replace(
        "__CSS__", json.dumps(PAGE_CSS)).replace("__DOUBLE_CLICK_MS__", str(DOUBLE_CLICK_MS)).replace(
        "__FOLLOW__", json.dumps(list(FOLLOW_PANELS))).replace("__SLACK__", str(FOLLOW_SLACK_PX))


SCROLL_JS = """
() => {
  const bar = document.getElementById('run-bar');  // the page only: panels scroll inside themselves
  if (bar) window.scrollBy({top: bar.getBoundingClientRect().top, behavior: 'instant'});
  const stop = document.getElementById('stop');
  if (stop) stop.classList.add('specvlm-running');
}
"""
"""Run's browser-side step: scroll the page so the Run / Stop / status bar is at the top of the window with the
live panels right under it, and make Stop red."""

_JS = """
() => {
  if (window.__specvlmHooks) return;
  window.__specvlmHooks = true;
  const EXTS = __EXTS__;
  const style = document.createElement('style');
  style.textContent = __CSS__;
  document.head.appendChild(style);
  const inBox = (el) => el && el.closest && el.closest('#video');
  const ext = (f) => (f.name.split('.').pop() || '').toLowerCase();
  const retype = (f) => (EXTS.includes(ext(f)) && !f.type.startsWith('video/'))
      ? new File([f], f.name, {type: 'video/' + ext(f), lastModified: f.lastModified}) : f;
  const retyped = (files) => {
    const list = Array.from(files || []);
    if (!list.some((f) => retype(f) !== f)) return null;
    const dt = new DataTransfer();
    list.forEach((f) => dt.items.add(retype(f)));
    return dt;
  };
  document.addEventListener('change', (ev) => {
    const t = ev.target;
    if (!(t instanceof HTMLInputElement) || t.type !== 'file' || !inBox(t)) return;
    const dt = retyped(t.files);
    if (dt) t.files = dt.files;
  }, true);
  document.addEventListener('drop', (ev) => {
    if (!inBox(ev.target) || !ev.dataTransfer || ev.__specvlm) return;
    const dt = retyped(ev.dataTransfer.files);
    if (!dt) return;
    ev.preventDefault();
    ev.stopImmediatePropagation();
    const again = new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true});
    again.__specvlm = true;
    ev.target.dispatchEvent(again);
  }, true);
  const ACCEPT = {'#video': 'video/*,' + EXTS.map((e) => '.' + e).join(','), '#srt': '.srt', '#truth': '.json'};
  const accept = () => Object.entries(ACCEPT).forEach(([box, want]) =>  // the file picker's filter only:
    document.querySelectorAll(box + ' input[type=file]').forEach((i) => {  // a dropped file of another
      if (i.accept !== want) i.accept = want;                              // type gets the server's message
    }));
  new MutationObserver(accept).observe(document.body, {childList: true, subtree: true});
  accept();
  let lastRun = 0;
  document.addEventListener('click', (ev) => {  // a double-click on Run starts one run, not two
    const el = (sel) => ev.target && ev.target.closest && ev.target.closest(sel);
    if (el('#stop') || el('#repeat-timing')) lastRun = 0;  // after Stop or a timing repeat, the next Run counts
    if (!el('#run')) return;
    if (Date.now() - lastRun < __DOUBLE_CLICK_MS__) { ev.stopImmediatePropagation(); ev.preventDefault(); return; }
    lastRun = Date.now();
  }, true);
  let wasDisabled = false;
  new MutationObserver(() => {  // Run enabled again by the server (a run ended or stops): clicks count
    const run = document.getElementById('run');
    if (!run) return;
    if (wasDisabled && !run.disabled) lastRun = 0;
    wasDisabled = run.disabled;
  }).observe(document.body, {subtree: true, attributes: true, attributeFilter: ['disabled']});
  const follow = {};  // panel id -> {stick: follows the newest text, top: where the user left it}
  const FOLLOW = __FOLLOW__;
  const box = (id) => document.querySelector('#' + id + ' .specvlm-tokens');
  const stateOf = (id) => follow[id] || (follow[id] = {stick: true, top: 0});
  document.addEventListener('scroll', (ev) => {  // the user's scrolling (and ours) says whether a panel follows
    const el = ev.target;
    const id = FOLLOW.find((i) => el === box(i));
    if (!id) return;
    const st = stateOf(id);
    st.stick = el.scrollHeight - el.clientHeight - el.scrollTop <= __SLACK__;
    st.top = el.scrollTop;
  }, true);
  const keepPlace = () => FOLLOW.forEach((id) => {  // each update replaces the panel: scroll the new one
    const el = box(id);
    if (!el) return;
    const st = stateOf(id);
    if (el.scrollHeight <= el.clientHeight + 1) { st.stick = true; st.top = 0; return; }  // a new run: follow
    const want = st.stick ? el.scrollHeight - el.clientHeight : st.top;
    if (Math.abs(el.scrollTop - want) > 1) el.scrollTop = want;
  });
  new MutationObserver(keepPlace).observe(document.body, {childList: true, subtree: true, characterData: true});
  document.addEventListener('error', (ev) => {
    const v = ev.target;
    if (!(v instanceof HTMLVideoElement) || !inBox(v)) return;
    ev.stopImmediatePropagation();  // no red "Video not playable" toast: the server sends a playable preview
  }, true);
  __RACE__
}
"""
