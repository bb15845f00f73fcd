"""The run view, in the main process: folds the worker's plain messages (:mod:`app.runs.worker`) into the
library's run records (:class:`specvlm.analysis.run.RunRecord`, one per panel) and builds the page's
updates from them (dicts keyed by :data:`OUTPUT_KEYS`): streaming panels, stats, summary, charts, heatmap
gallery, status, record.

Each update carries only what changed, the last one everything. Charts are redrawn when a run's first verify
step (vanilla: first token) arrives, then at most every ``plot_interval_s`` and at the end (re-drawing plotly figures
is the browser's heaviest work). The status line carries the Run's progress bar, from the same update.

Source: SpecVLM (arXiv 2508.16201) Sec. 4.12 (τ, tokens per forward, speedup); docs/design.md §1, §3.
"""
from __future__ import annotations

import dataclasses
import re
import time
from typing import Any

from app.inputs.settings import HEATMAP_MODES, PLOT_INTERVAL_S
from app.runs.progress import LayerProgress, decode_status, layer_status
from app.runs.timing import MachineLoad, PairTiming, speed_note
from app.runs.worker import ClipReady, Failure, Heatmaps, Phase, Record, RunEvents
from app.views import plots
from app.views.progress_bar import status_with_bar
from app.views.race import race_html
from app.views.summary import Speed, summary_md
from specvlm.analysis.metrics import median_speedup
from specvlm.analysis.run import Comparison, RunRecord, prefill_from_dict, run_speedup
from specvlm.types import StepEvent

OUTPUT_KEYS = (
    "status", "vanilla_html", "vanilla_stats", "spec_html", "spec_stats", "summary",
    "gallery", "heatmap_legend", "accept_plot", "time_plot", "heatmaps", "record", "race",
)
"""Keys of the update dicts, in the UI's output order. ``heatmaps`` is the per-session heatmap state
for :func:`pick_heatmaps`; ``record`` the speculative run's ``RunRecord`` for Inspect and Export; ``race`` the
replay of both finished runs on one clock (:func:`app.views.race.race_html`, "" until both finished)."""

PHASES = {"frames": (0.2, "Decoding video frames"), "vanilla": (0.3, "Prefill (vanilla)"),
          "spec": (0.6, "Prefill + pruning"), "repeat": (0.9, "Timing runs"),
          "explain": (0.95, "Explaining the failing steps")}
"""Worker phase -> (progress fraction, description)."""


@dataclasses.dataclass
class RunPanel:
    """One panel of the page: its name, the library's record of the run it shows (every number comes from
    it) and where the run stands."""

    name: str
    record: RunRecord = dataclasses.field(default_factory=RunRecord)
    done: bool = False
    stopped: bool = False
    error: str | None = None

    def add(self, msg: RunEvents) -> None:
        """Fold a batch of the run's events into the record."""
        for ev in msg.events:
            self.record.add(prefill_from_dict(ev) if isinstance(ev, dict) else ev)
        self.done = self.done or msg.finished

    def stats_md(self, speculative: bool) -> str:
        """'0.84 s · 37 tokens · 44.0 tok/s' (+ τ) with a phase marker."""
        rec = self.record
        m = rec.summary
        parts = [f"{m.decode_s:.2f} s", f"{rec.num_generated} tokens", f"{m.tokens_per_s:.1f} tok/s"]
        if speculative and m.accept_lengths:
            parts.append(f"τ {m.tau:.2f}")
        if rec.prefill is not None:
            parts.append(f"prefill {rec.prefill.prefill_s:.2f} s")
        state = ("error" if self.error else "stopped" if self.stopped else "done" if self.done
                 else "decoding" if rec.steps else "waiting")
        return f"**{self.name}** · {state} · " + " · ".join(parts)


class RunView:
    """The page's view of one Run.

    Args:
        label: the speculative panel's name (``SpecVLM`` or ``SD (method)``).
        dec: the speculative run's ``DecodeConfig`` (tree depth for the chart, sampling for the summary).
        mode: heatmap mode shown (``stages`` / ``scores``).
        notes: input notes known before the worker starts (subtitles, ground truth).
        prompt_note: the note on the prompt ("" if none).
        forced_requested: the run asked to force on-screen-text tokens.
        plot_interval_s: minimum seconds between chart updates while decoding.
        caveat: a sentence put at the top of the summary (e.g. the bundled model on a real video).
    """

    def __init__(self, label: str, dec: Any, mode: str = "stages", notes: list[str] | None = None,
                 prompt_note: str = "", forced_requested: bool = False,
                 plot_interval_s: float = PLOT_INTERVAL_S, caveat: str = "") -> None:
        self.runs = {"vanilla": RunPanel("Vanilla"), "spec": RunPanel(label)}
        self.dec, self.mode = dec, mode
        self.notes = [n for n in (notes or []) if n]
        self.prompt_note = prompt_note
        self.forced_requested = forced_requested
        self.plot_interval_s = plot_interval_s
        self.caveat = caveat
        self.started = False  # the video is decoded and both panels exist
        self.num_frames = 0
        self.heatmaps: dict | None = None
        self.comparison: Comparison | None = None
        self.record: Any = None
        self.failure: str | None = None
        self.pairs: list[PairTiming] = []
        self.load: MachineLoad | None = None
        self.stopped = False
        self._plotted = 0.0
        self._charted: set[str] = set()   # runs whose verify steps (or tokens) the charts already show
        self._bar: tuple[float, str] | None = None   # the last progress (fraction, description)
        self._seen: list[str] = []
        self._told_vanilla_decodes = False   # the empty SpecVLM panel said "waiting · vanilla decoding"

    # ---- folding -----------------------------------------------------------------------------

    def fold(self, batch: list[Any], progress: Any = None) -> dict[str, Any]:
        """Fold one batch of worker messages; returns the update it calls for. Its status carries the progress bar
        of the same moment (:func:`app.views.progress_bar.status_with_bar`); ``progress(fraction, description)``
        hears of every progress step too."""
        progress = self._reporter(progress)
        upd: dict[str, Any] = {}
        changed: list[str] = []
        for msg in batch:
            if isinstance(msg, Phase):
                upd.update(self._phase(msg.name, progress))
            elif isinstance(msg, ClipReady):
                self._clip(msg)
                upd.update(self.full(), status=f"Prefill (vanilla)… {msg.num_frames} frames. {self.notes_text()}")
            elif isinstance(msg, Heatmaps):
                self.heatmaps = msg.data
                upd["heatmaps"] = msg.data
                upd["gallery"], upd["heatmap_legend"] = pick_heatmaps(msg.data, self.mode)
            elif isinstance(msg, LayerProgress):
                upd.update(self._layer(msg, progress))
            elif isinstance(msg, RunEvents):
                self.runs[msg.run].add(msg)
                self._decoding(msg, progress)
                changed.append(msg.run)
            elif isinstance(msg, Comparison):
                self.comparison = msg
            elif isinstance(msg, Record):
                self.record = RunRecord.from_json(msg.data)
            elif isinstance(msg, PairTiming):
                self.pairs.append(msg)
                upd["status"] = f"Timing runs: pair {msg.index} of {msg.total} done…"
            elif isinstance(msg, MachineLoad):
                self.load = msg
            elif isinstance(msg, Failure):
                self.failure = msg.message
        for name in dict.fromkeys(changed):
            upd.update(self.step_update(name))
        if "status" in upd and self._bar is not None:
            upd["status"] = status_with_bar(upd["status"], *self._bar)
        return upd

    def _reporter(self, progress: Any) -> Any:
        """``progress`` that also keeps the last (fraction, description) for the status line's bar."""
        def report(frac: float, desc: str) -> None:
            self._bar = (frac, desc)
            if progress is not None:
                progress(frac, desc)
        return report

    def _phase(self, name: str, progress: Any) -> dict[str, Any]:
        frac, desc = PHASES[name]
        if name == "spec":
            desc = f"{desc} ({self.runs['spec'].name})"
        if progress is not None:
            progress(frac, desc)
        if name == "frames":
            return {"status": "Decoding video frames…"}
        if name == "spec":
            return {"status": f"Prefill, scoring and pruning ({self.runs['spec'].name})…"}
        if name == "repeat":
            return {"status": "Timing runs: more interleaved vanilla / speculative pairs…"}
        if name == "explain":
            return {"status": "Both runs finished. Explaining the lowest-acceptance steps for Inspect (one more "
                              "target pass over the prompt; Stop skips it)…"}
        return {}

    def _layer(self, msg: LayerProgress, progress: Any) -> dict[str, Any]:
        """Progress inside a long call, one message per part or tick (:func:`app.runs.progress.layer_status`); a
        text panel still empty says ``waiting ·`` and the part that runs."""
        frac, desc, status = layer_status(msg, PHASES, self.runs["spec"].name, self.num_frames, self.notes_text())
        if progress is not None:
            progress(frac, desc)
        upd: dict[str, Any] = {"status": status}
        wait = f"waiting · {desc[:1].lower()}{desc[1:]}"   # an empty panel says what the run is doing
        van, spec = self.runs["vanilla"], self.runs["spec"]
        if msg.phase != "explain" and not (van.record.text or van.done or van.stopped):
            upd["vanilla_html"] = plots.plain_text_html("", placeholder=wait)
        if msg.phase != "explain" and not (spec.record.pieces() or spec.done or spec.stopped):
            upd["spec_html"] = plots.tokens_html([], legend=False, placeholder=wait)
        return upd

    def _decoding(self, msg: RunEvents, progress: Any) -> None:
        """Progress after each decode step of a batch (:func:`app.runs.progress.decode_status`)."""
        if progress is None:
            return
        budget = int(getattr(self.dec, "max_new_tokens", 0) or 0)
        for ev in msg.events:
            if isinstance(ev, StepEvent):
                progress(*decode_status(msg.run, self.runs[msg.run].name, ev.num_generated, budget, PHASES))

    def _clip(self, msg: ClipReady) -> None:
        self.started = True
        self.num_frames = msg.num_frames
        notes = [*(user_note(n) for n in msg.notes), *self.notes]
        if msg.transcript_gap:
            notes = [n for n in notes if "subtitle cue" not in n] + [msg.transcript_gap]
        self.notes = notes

    def notes_text(self) -> str:
        """The input notes as one line (the prompt's first)."""
        return "; ".join(n for n in [self.prompt_note.rstrip("."), *self.notes] if n)

    # ---- updates -----------------------------------------------------------------------------

    def step_update(self, name: str) -> dict[str, Any]:
        """Text and stats of one run; charts at most every ``plot_interval_s`` and at the end."""
        st = self.runs[name]
        spec = name == "spec"
        if name not in self._seen:
            self._seen.append(name)
        upd: dict[str, Any] = {}
        if spec:
            upd["spec_html"] = plots.tokens_html(st.record.pieces(), legend=False, placeholder="prefill…")
            upd["spec_stats"] = st.stats_md(True)
        else:
            upd["vanilla_html"] = plots.plain_text_html(st.record.text, placeholder="prefill…")
            upd["vanilla_stats"] = st.stats_md(False)
            other = self.runs["spec"]
            if not (self._told_vanilla_decodes or other.record.pieces() or other.done or other.stopped):
                self._told_vanilla_decodes = True   # once: the prefill's part count there is over
                upd["spec_html"] = plots.tokens_html([], legend=False, placeholder="waiting · vanilla decoding")
        phase = "stopped" if st.stopped else "finished" if st.done else "decoding"
        budget = int(getattr(self.dec, "max_new_tokens", 0) or 0)
        upd["status"] = (decode_status(name, st.name, st.record.num_generated, budget, PHASES)[1]
                         if phase == "decoding" else f"{st.name} {phase}: {st.record.num_generated} tokens")
        now = time.perf_counter()
        news = name not in self._charted and bool(st.record.accept_lengths if spec else st.record.steps)
        if st.done or st.stopped or news or now - self._plotted >= self.plot_interval_s:
            self._plotted = now
            if news:
                self._charted.add(name)   # the first verify step shows at once, then every plot_interval_s
            upd["time_plot"] = self._time_fig()
            if spec:
                upd["accept_plot"] = self._accept_fig()
        return upd

    def _accept_fig(self) -> Any:
        rec = self.runs["spec"].record
        return plots.accept_length_figure(rec.accept_lengths, rec.step_texts,
                                          max_depth=getattr(getattr(self.dec, "tree", None), "depth", None))

    def _time_fig(self) -> Any:
        return plots.tokens_over_time_figure({self.runs[n].name: (self.runs[n].record.times,
                                                                  self.runs[n].record.counts) for n in self._seen})

    def full(self) -> dict[str, Any]:
        """A complete update (every key but ``record``) from the current state."""
        van, spec = self.runs["vanilla"], self.runs["spec"]
        self._seen = ["vanilla", "spec"]
        gallery, legend = pick_heatmaps(self.heatmaps, self.mode)
        return {
            "status": "",
            "vanilla_html": plots.plain_text_html(van.record.text, placeholder=_placeholder(van)),
            "vanilla_stats": van.stats_md(False),
            "spec_html": plots.tokens_html(spec.record.pieces(), legend=False, placeholder=_placeholder(spec)),
            "spec_stats": spec.stats_md(True),
            "summary": "\n\n".join(x for x in (self.caveat, summary_md(van, spec, self.dec, self.comparison,
                                                                         self.speed())) if x),
            "gallery": gallery,
            "heatmap_legend": legend,
            "accept_plot": self._accept_fig(),
            "time_plot": self._time_fig(),
            "heatmaps": self.heatmaps,
            "race": race_html(van.record, spec.record, (van.name, spec.name)) if van.done and spec.done else "",
        }

    def speed(self) -> Speed:
        """The decode speedup as the summary reports it: one pair's, or the median of the timing pairs."""
        van, spec = self.runs["vanilla"], self.runs["spec"]
        if not (van.done and spec.done):
            return Speed(None, [], "")
        if self.comparison is not None:
            runs = list(self.comparison.speedup_runs)
        else:   # both runs finished, the comparison is still on its way
            runs = [r for r in (run_speedup(van.record, spec.record), *(p.speedup for p in self.pairs)) if r]
        note = speed_note([van.record.decode_s, spec.record.decode_s], self.load.other_cores if self.load else None,
                          max(1, len(runs)))
        return Speed(median_speedup(runs), runs, note)

    def final(self, stopped: bool, next_queued: bool = False) -> dict[str, Any]:
        """The last update: everything, the status line and the record (None when the run kept none).

        Args:
            stopped: the run was stopped (recorded in :attr:`stopped`).
            next_queued: a Run is waiting for this one to end (the status says it starts now).
        """
        stopped = stopped and self.comparison is None  # a Stop while explaining steps keeps the finished comparison
        self.stopped = stopped
        for st in self.runs.values():
            if not st.done:
                st.stopped = stopped
        if self.failure is not None:
            return self.fail(self.failure)
        if not stopped and self.comparison is None:  # the GPU function ended without both results
            return self.fail(f"The GPU work ended {self.where()} without both results: try again.")
        notes = "; ".join(n for n in [self.notes_text(), self._forced_note()] if n)
        head = final_status(stopped, next_queued)
        upd = self.full() if self.started else {}
        upd["status"] = f"{head}  \n*Input notes: {notes}*" if notes else head
        upd["record"] = self.record
        upd["speed_note"] = self.speed().note if self.started else ""
        return upd

    def where(self) -> str:
        """How far the Run got, for a message: "before the video was read", "after 14 of 128 vanilla
        tokens", "after 3 of 128 speculative tokens (vanilla finished)" or "after both runs finished"."""
        van, spec = self.runs["vanilla"], self.runs["spec"]
        budget = getattr(self.dec, "max_new_tokens", None)
        of = f" of {budget}" if budget else ""
        if not self.started:
            return "before the video was read"
        if not van.done:
            return f"after {van.record.num_generated}{of} vanilla tokens"
        if not spec.done:
            return f"after {spec.record.num_generated}{of} speculative tokens (vanilla finished)"
        return "after both runs finished"

    def fail(self, msg: str) -> dict[str, Any]:
        """The error update: runs not finished are marked failed; ``error`` is also shown as a toast."""
        for st in self.runs.values():
            if not st.done:
                st.error = msg
        upd = self.full() if self.started else {}
        upd.update(status=f"**Error:** {msg}", error=msg)
        return upd

    def _forced_note(self) -> str:
        """The status note on forced on-screen-text tokens ("" if none were asked for or the run stopped)."""
        rec = self.runs["spec"].record
        if not self.forced_requested or rec.prefill is None or not self.runs["spec"].done:
            return ""
        if rec.num_forced:
            n, k = rec.num_forced, rec.num_kept   # forced tokens count against the budget: say what gave way
            took = "fill the draft's whole budget" if k is not None and n >= k else \
                f"count against the draft's {k}-token budget: {n} of its Stage I/II picks gave way"
            return f"kept {n} on-screen-text token{'s' if n != 1 else ''} (they {took})"
        return "no on-screen-text tokens were forced: " + (
            "this run did not prune" if rec.num_kept is None else "the text is on none of the sampled frames")


_DETAIL = re.compile(r"Error\b|error:|Check failed|Failed to|Traceback|errno", re.IGNORECASE)
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:/[^/\s'\"()]+)+/([^/\s'\"()]+)")
_DECODER = re.compile(r"decoded with PyAV: decord could not read this (\S+) file")


def user_note(note: str) -> str:
    """An input note in the user's terms: decoder internals in parentheses (``DECORDError: Check failed ...``,
    ``Failed to measure duration``) are dropped (the library logs them) and server paths become file names.

    Source: docs/design.md §8 (video traps).
    """
    text = _DECODER.sub(r"decoded with PyAV, the fallback decoder: the fast decoder cannot read this \1 file",
                        str(note))
    out, i = [], 0
    while i < len(text):
        j = text.find("(", i)
        if j < 0:
            out.append(text[i:])
            break
        depth, k = 0, j
        while k < len(text):  # the balanced group that starts at j
            depth += {"(": 1, ")": -1}.get(text[k], 0)
            if depth == 0:
                break
            k += 1
        group = text[j:k + 1]
        out.append(text[i:j].rstrip() if _DETAIL.search(group) else text[i:j] + group)
        i = k + 1
    return _PATH.sub(lambda m: m.group(1), "".join(out)).strip()


def _placeholder(st: RunPanel) -> str:
    """What an empty text panel says: ``waiting…`` until its run starts, or why it never will."""
    return "stopped before it started" if st.stopped else "not run: the Run failed" if st.error else "waiting…"


def final_status(stopped: bool, next_queued: bool = False) -> str:
    """The status line of a Run that ended (stopped or done; whether the next Run starts now)."""
    nxt = "The next run starts now." if next_queued else "Ready for the next run."
    return f"**Stopped.** {nxt}" if stopped else f"**Done.** {nxt}"


def pick_heatmaps(state: dict[str, Any] | None, mode: str) -> tuple[list, str]:
    """(gallery items, legend HTML) for a heatmap state and a mode.

    Args:
        state: the ``heatmaps`` value of a run (None before any run).
        mode: a :data:`HEATMAP_MODES` label or ``"stages"`` / ``"scores"``.
    """
    mode = HEATMAP_MODES.get(mode, mode)
    if not state:
        return [], plots.heatmap_legend_html(mode)
    legend = plots.heatmap_legend_html(mode, state.get("fpt", 1))
    if state.get("summary"):
        legend = f"<div><b>{state['summary']}</b></div>" + legend
    if state.get("note"):
        legend += f"<div><i>{state['note']}</i></div>"
    items = state.get(mode)
    if items is None:
        return [], legend + "<div><i>Raw scores are not available for this method.</i></div>"
    return items, legend


def blank_outputs() -> dict[str, Any]:
    """Plain empty values for every page output but ``record`` (what an API client gets for outputs a
    failed run never reached, instead of Gradio's raw update objects)."""
    return {"status": "", "vanilla_html": plots.plain_text_html("", placeholder="waiting…"), "vanilla_stats": "",
            "spec_html": plots.tokens_html([], legend=False, placeholder="waiting…"), "spec_stats": "",
            "summary": "", "gallery": [], "heatmap_legend": plots.heatmap_legend_html("stages"),
            "accept_plot": None, "time_plot": None, "heatmaps": None, "race": ""}


def fresh_outputs() -> dict[str, Any]:
    """What every Run shows first, before its own results: both panels ``waiting…``, no stats or summary, empty
    charts and no heatmaps (nothing of the run before it); ``status`` and ``record`` are left to the caller."""
    out = blank_outputs()
    del out["status"]
    return out | {"accept_plot": plots.accept_length_figure([]), "time_plot": plots.tokens_over_time_figure({})}


