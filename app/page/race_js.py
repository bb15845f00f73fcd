"""The race's player in the browser (:mod:`app.views.race` writes the data): installed with the page's hooks
(:func:`app.page.page_js.page_js`).

When a race block (``#race .specvlm-race``) appears, both lanes play from 0 s on one clock: each lane's track
shows its prefill, then each decode step's tokens appear at the step's measured time (``data-race``'s
``steps``), the state says ``prefill…``, ``decoding · N tokens`` and ``finished at X s``, and the clock stops at
the later finish. *Replay the race* (``.race-replay``) plays it again from 0 s. Nothing is timed in the browser
but the replay itself: every time comes from the runs' records.

Source: docs/design.md §12 (what a user feels is the whole Run).
"""
from __future__ import annotations

from app.views.plots import DRAFT_BG, TARGET_BG

RACE_CSS = """
.specvlm-race .race-head { display: flex; flex-wrap: wrap; gap: 0.5em 1em; align-items: center; }
.specvlm-race .race-title { flex: 1 1 20em; font-size: var(--text-sm); }
.specvlm-race .race-replay { padding: 0.25em 0.9em; border-radius: var(--button-small-radius);
  border: 1px solid var(--border-color-primary); background: var(--button-secondary-background-fill);
  color: var(--button-secondary-text-color); cursor: pointer; }
.specvlm-race .race-clock { font-family: ui-monospace, monospace; font-weight: 700; min-width: 5em; }
.specvlm-race .race-lanes { display: grid; grid-template-columns: repeat(auto-fit, minmax(18em, 1fr)); gap: 1em;
  margin: 0.6em 0; }
.specvlm-race .race-track { position: relative; height: 0.6em; border-radius: 0.3em; margin: 0.3em 0;
  background: var(--border-color-primary); overflow: hidden; }
.specvlm-race .race-prefill { position: absolute; inset: 0 auto 0 0; background: rgba(148, 163, 184, 0.9); }
.specvlm-race .race-fill { position: absolute; inset: 0 auto 0 0; background: var(--color-accent); opacity: 0.8; }
.specvlm-race .race-text { white-space: pre-wrap; word-break: break-word; font-family: ui-monospace, monospace;
  font-size: 0.85em; height: 12em; overflow-y: auto; padding: 0.4em; border: 1px solid var(--border-color-primary);
  border-radius: var(--radius-sm); }
.specvlm-race .race-text .tok-draft { background: %s; border-radius: 2px; }
.specvlm-race .race-text .tok-target { background: %s; border-radius: 2px; }
""" % (DRAFT_BG, TARGET_BG)
"""The race block's style: lanes side by side (stacked when narrow), a track per lane (grey: prefill, accent:
decoding up to the clock), the speculative lane's tokens coloured as in its live panel."""

RACE_JS = """
  const race = {el: null, raf: 0};
  const playRace = (el) => {
    cancelAnimationFrame(race.raf);
    race.el = el;
    let data;
    try { data = JSON.parse(el.dataset.race); } catch (e) { return; }
    const end = Math.max(...data.lanes.map((l) => l.finish_s), 1e-6);
    const clock = el.querySelector('.race-clock');
    const lanes = data.lanes.map((l, i) => {
      const box = el.querySelector('.race-lane[data-lane="' + i + '"]');
      box.querySelector('.race-text').textContent = '';
      box.querySelector('.race-prefill').style.width = (100 * l.prefill_s / end) + '%';
      return {l, i, box, shown: 0, count: 0};
    });
    el.dataset.playing = '1';
    const t0 = performance.now();
    const frame = () => {
      if (race.el !== el || !el.isConnected) return;
      const t = Math.min((performance.now() - t0) / 1000, end);
      clock.textContent = t.toFixed(2) + ' s';
      for (const ln of lanes) {
        const text = ln.box.querySelector('.race-text');
        const steps = ln.l.steps;
        let added = false;
        while (ln.shown < steps.length && steps[ln.shown][0] <= t) {
          for (const [piece, draft] of steps[ln.shown][1]) {
            ln.count += 1;
            if (!piece) continue;
            const span = document.createElement('span');
            if (ln.i > 0) span.className = draft ? 'tok tok-draft' : 'tok tok-target';
            span.textContent = piece;
            text.appendChild(span);
          }
          ln.shown += 1;
          added = true;
        }
        if (added) text.scrollTop = text.scrollHeight;
        ln.box.querySelector('.race-fill').style.left = (100 * Math.min(t, ln.l.prefill_s) / end) + '%';
        ln.box.querySelector('.race-fill').style.width = (100 * Math.max(0, Math.min(t, ln.l.finish_s)
                                                                              - ln.l.prefill_s) / end) + '%';
        ln.box.querySelector('.race-state').textContent = t < ln.l.prefill_s ? 'prefill…'
          : ln.shown < steps.length ? 'decoding · ' + ln.count + ' tokens'
          : 'finished at ' + ln.l.finish_s.toFixed(2) + ' s · ' + ln.count + ' tokens';
      }
      if (t < end) { race.raf = requestAnimationFrame(frame); return; }
      el.dataset.playing = '';
      el.dataset.played = String(Number(el.dataset.played || 0) + 1);
    };
    frame();
  };
  new MutationObserver(() => {  // a new race block (both runs finished): play it once
    const el = document.querySelector('#race .specvlm-race');
    if (el && el !== race.el) playRace(el);
  }).observe(document.body, {childList: true, subtree: true});
  document.addEventListener('click', (ev) => {
    const btn = ev.target && ev.target.closest && ev.target.closest('.race-replay');
    if (btn) playRace(btn.closest('.specvlm-race'));
  });
"""
"""Statements run inside the page's hook function: the player, its start on a new race block and the replay
button."""
