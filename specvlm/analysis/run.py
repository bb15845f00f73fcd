"""The run record: one typed object that folds a decode's events and answers what a front end shows.

A :class:`RunRecord` is built from the events of :func:`specvlm.engine.stream.stream`: one
:class:`~specvlm.types.PrefillInfo`, then :class:`~specvlm.types.StepEvent` s, folded one at a time
(:meth:`RunRecord.add`) while a run streams or all at once (:meth:`RunRecord.from_events`). It answers
the text and its per-token pieces (the engine's own text deltas; nothing is decoded again), τ, accept
lengths, tokens/s, kept video tokens, and it is one plain, versioned JSON object
(:meth:`RunRecord.to_json` / :meth:`RunRecord.from_json`; every older version still reads). Two runs
of the same input compare through :func:`compare_runs` into a :class:`Comparison` (identical,
near-tie or mismatch, and the decode speedup, :func:`specvlm.analysis.metrics.speedup`), whose
:meth:`Comparison.to_json` is the one comparison schema of the CLI, the benchmark's reports and the app.

Source: docs/design.md §3 (one run record), §4.11-4.12 (lossless comparison, metrics).
"""
from __future__ import annotations

import base64
import dataclasses
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from specvlm.analysis.metrics import (Divergence, RunSummary, compare_outputs, median_speedup, speedup,
                                      summarize)
from specvlm.types import DraftTreeRecord, PrefillInfo, PruneResult, StepEvent

RECORD_FORMAT = "specvlm-run"
RECORD_VERSION = 1
"""Bumped whenever a field changes meaning; :meth:`RunRecord.from_json` refuses newer versions. Fields
added with a default keep the version: older files read with the default."""


class RecordError(ValueError):
    """A run file is not a SpecVLM run record, or a step/record query is invalid."""


@dataclass
class RunRecord:
    """One run: its settings, prompt and the stream's own events, replayable without a model.

    Attributes:
        settings: the DecodeConfig as a nested dict (``dataclasses.asdict``).
        prompt: the user prompt.
        prefill: the stream's :class:`~specvlm.types.PrefillInfo` (None until it arrived).
        steps: the stream's :class:`~specvlm.types.StepEvent` s (step 0 = the prefill token).
        token_text: id -> decoded text for every id in the outputs and trees (so a replay needs
            no tokenizer); empty when no tokenizer was given.
        timestamps: sampled-frame times (s), or [].
        thumbnails: base64 PNG of the first frame of each token frame group (small), or [].
        meta: free-form (model name, video path, subtitle mode, text coverage, ...).
        version: :data:`RECORD_VERSION`.
        why: :class:`specvlm.analysis.why.StepWhy` fields (dicts) of the explained failing steps, or [].

    Source: docs/design.md §3 (one run record), §4.12 (τ, tokens/s over decode time).
    """

    settings: dict = field(default_factory=dict)
    prompt: str = ""
    prefill: PrefillInfo | None = None
    steps: list[StepEvent] = field(default_factory=list)
    token_text: dict[int, str] = field(default_factory=dict)
    timestamps: list[float] = field(default_factory=list)
    thumbnails: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    version: int = RECORD_VERSION
    why: list[dict] = field(default_factory=list)

    # ---- the fold ------------------------------------------------------------------------------
    def add(self, event: PrefillInfo | StepEvent) -> None:
        """Fold one event of the stream in (a PrefillInfo sets :attr:`prefill`, a StepEvent is appended).

        Raises:
            TypeError: ``event`` is neither.
        """
        if isinstance(event, PrefillInfo):
            self.prefill = event
        elif isinstance(event, StepEvent):
            self.steps.append(_plain_step(event))
        else:
            raise TypeError(f"a run record folds PrefillInfo and StepEvent, got {type(event).__name__}.")

    @classmethod
    def from_events(cls, events: Iterable[PrefillInfo | StepEvent], config: Any = None,
                    prompt: str = "") -> RunRecord:
        """A record of ``events`` (consumed), with ``config`` (a DecodeConfig, a dict or None) as settings."""
        settings = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config or {})
        rec = cls(settings, prompt)
        for ev in events:
            rec.add(ev)
        return rec

    # ---- what a front end shows ------------------------------------------------------------------
    @property
    def speculative(self) -> bool:
        """True when the run pruned for a draft (its PrefillInfo carries a pruning result)."""
        return self.prefill is not None and self.prefill.prune is not None

    @property
    def verify_steps(self) -> list[StepEvent]:
        """Steps after the prefill token (one per target forward)."""
        return [s for s in self.steps if s.step > 0]

    @property
    def accept_lengths(self) -> list[int]:
        """Accepted draft tokens per verify step (empty for vanilla)."""
        return self.summary.accept_lengths

    @property
    def tau(self) -> float:
        """τ, mean accepted length over verify steps (bonus excluded); 0 without steps."""
        return self.summary.tau

    @property
    def summary(self) -> RunSummary:
        """Tokens/s, τ, tokens per target forward, decode time (:func:`specvlm.analysis.metrics.summarize`)."""
        return summarize(self.steps, self.speculative)

    @property
    def text(self) -> str:
        """The generated text so far (the engine's text deltas joined)."""
        return "".join(s.text for s in self.steps)

    @property
    def token_ids(self) -> list[int]:
        return [t for s in self.steps for t in s.token_ids]

    @property
    def num_generated(self) -> int:
        """Tokens generated so far, the prefill's token included."""
        return self.steps[-1].num_generated if self.steps else 0

    @property
    def decode_s(self) -> float:
        """Decode wall time so far (s), prefill excluded (the last step's clock)."""
        return self.steps[-1].elapsed_s if self.steps else 0.0

    @property
    def times(self) -> list[float]:
        """Per step: decode seconds since the first decode step (for a tokens-over-time chart)."""
        return [s.elapsed_s for s in self.steps]

    @property
    def counts(self) -> list[int]:
        """Per step: tokens generated so far."""
        return [s.num_generated for s in self.steps]

    @property
    def step_texts(self) -> list[str]:
        """The text each verify step emitted (same order as :attr:`accept_lengths`)."""
        return [s.text for s in self.verify_steps]

    def pieces(self) -> list[tuple[str, bool]]:
        """(text, from_draft) per emitted token: the engine's per-token text pieces; a step without them
        is one piece, from the draft when all its tokens were."""
        out: list[tuple[str, bool]] = []
        for s in self.steps:
            flags = list(s.from_draft) or [False] * len(s.token_ids)
            if len(s.pieces) == len(flags):
                out.extend((p, bool(f)) for p, f in zip(s.pieces, flags))
            else:
                out.append((s.text, bool(flags) and all(flags)))
        return out

    def token_texts(self) -> list[str]:
        """Text per generated token (the engine's pieces; a step without them puts its text on its
        first token)."""
        out: list[str] = []
        for s in self.steps:
            if len(s.pieces) == len(s.token_ids):
                out.extend(s.pieces)
            elif s.token_ids:
                out.extend([s.text] + [""] * (len(s.token_ids) - 1))
        return out

    @property
    def margins(self) -> list[float]:
        """Per generated token, the target's top-1 minus top-2 logit margin, up to the first step that
        recorded none (vanilla runs record one per token; :func:`specvlm.analysis.metrics.compare_outputs`)."""
        out: list[float] = []
        for s in self.steps:
            if s.margin is None:
                break
            out.extend([float(s.margin)] * len(s.token_ids))
        return out

    @property
    def num_video_tokens(self) -> int:
        return self.prefill.num_video_tokens if self.prefill is not None else 0

    @property
    def num_kept(self) -> int | None:
        """Video tokens the draft kept (None for a run without pruning)."""
        p = self.prefill.prune if self.prefill is not None else None
        return None if p is None else p.num_kept

    @property
    def added_per_step(self) -> dict[int, list[int]]:
        """Step number -> video-token indices re-selection added to the draft after that step (steps that
        added some only; :attr:`specvlm.types.StepEvent.added`)."""
        return {int(s.step): [int(t) for t in s.added] for s in self.steps if s.added}

    @property
    def num_added(self) -> int:
        """Video tokens re-selection added over the run (0 without re-selection)."""
        return sum(len(a) for a in self.added_per_step.values())

    @property
    def r_used(self) -> float | None:
        """The drop rate r the run's pruning used (None for a run without pruning) and, in :attr:`r_reason`, why."""
        if not self.speculative:
            return None
        if not self.prefill.r_reason:   # a record from before r was recorded: the settings' r
            return float((self.settings.get("prune") or {}).get("drop_rate", self.prefill.r_used))
        return float(self.prefill.r_used)

    @property
    def r_reason(self) -> str:
        return "" if self.prefill is None else self.prefill.r_reason

    @property
    def num_forced(self) -> int:
        """Video tokens kept because the caller forced them (0 without)."""
        p = self.prefill.prune if self.prefill is not None else None
        return 0 if p is None or p.forced is None else int(torch.as_tensor(p.forced).numel())

    def get_step(self, step: int) -> StepEvent:
        """The StepEvent with ``step`` number; raises RecordError if absent."""
        for s in self.steps:
            if s.step == int(step):
                return s
        raise RecordError(f"step {step} is not in this run (steps 0..{len(self.steps) - 1}).")

    def frames(self) -> np.ndarray | None:
        """uint8 (T, h, w, 3) frames from the thumbnails (each repeated ``frames_per_token`` times)."""
        if not self.thumbnails:
            return None
        from PIL import Image

        imgs = [np.asarray(Image.open(io.BytesIO(base64.b64decode(b))).convert("RGB")) for b in self.thumbnails]
        fpt = self.prefill.frames_per_token if self.prefill is not None else 1
        return np.repeat(np.stack(imgs), max(1, fpt), axis=0)

    # ---- JSON ----------------------------------------------------------------------------------
    def run_json(self) -> dict[str, Any]:
        """The run's numbers as plain JSON data (the one per-run schema of the CLI and the app): text,
        token_ids, method, tokens, num_prompt_tokens, num_video_tokens, num_kept (None without pruning),
        num_forced, target/draft_subtitle_tokens, tau, tokens_per_target_forward, accept_lengths, decode_s,
        tokens_per_s, prefill_s, prune_s, draft_prefill_s, draft_s, verify_s (seconds), stage1, stage2, r_used,
        r_reason, added (step -> video tokens re-selection added, keys as strings), num_added."""
        m, p = self.summary, self.prefill
        pr = p.prune if p is not None else None
        pick = lambda name: None if p is None else getattr(p, name)  # noqa: E731
        return {
            "text": self.text, "token_ids": [int(t) for t in self.token_ids], "method": self.settings.get("method"),
            "tokens": self.num_generated, "num_prompt_tokens": pick("num_prompt_tokens"),
            "num_video_tokens": pick("num_video_tokens"), "num_kept": self.num_kept, "num_forced": self.num_forced,
            "target_subtitle_tokens": pick("target_subtitle_tokens"),
            "draft_subtitle_tokens": pick("draft_subtitle_tokens"),
            "tau": m.tau, "tokens_per_target_forward": m.tokens_per_target_forward,
            "accept_lengths": list(m.accept_lengths), "decode_s": m.decode_s, "tokens_per_s": m.tokens_per_s,
            "prefill_s": pick("prefill_s"), "prune_s": pick("prune_s"), "draft_prefill_s": pick("draft_prefill_s"),
            "draft_s": m.draft_s, "verify_s": m.verify_s,
            "stage1": _ints(pr.stage1 if pr is not None else None),
            "stage2": _ints(pr.stage2 if pr is not None else None),
            "r_used": self.r_used, "r_reason": self.r_reason,
            "added": {str(k): v for k, v in self.added_per_step.items()}, "num_added": self.num_added,
        }

    def to_json(self) -> dict:
        """Plain JSON-ready dict with a ``format`` tag (token_text keys as strings); :meth:`from_json` reads it."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["prefill"] = None if self.prefill is None else prefill_to_dict(self.prefill)
        d["steps"] = [dataclasses.asdict(s) for s in self.steps]
        d["token_text"] = {str(k): v for k, v in self.token_text.items()}
        return {"format": RECORD_FORMAT, **d}

    @classmethod
    def from_json(cls, d: dict) -> RunRecord:
        """Inverse of :meth:`to_json`; reads every version up to :data:`RECORD_VERSION`.

        Raises:
            RecordError: not a run record, a newer version than this code reads, or malformed.
        """
        if not isinstance(d, dict) or d.get("format") != RECORD_FORMAT:
            raise RecordError("this file is not a SpecVLM run record (expected a JSON object with "
                              f"\"format\": \"{RECORD_FORMAT}\"); export one from the app or with save_json.")
        version = int(d.get("version", 0))
        if version > RECORD_VERSION or version < 1:
            raise RecordError(f"run record version {version} is not supported (this code reads 1..{RECORD_VERSION}).")
        try:
            pre = None if d["prefill"] is None else prefill_from_dict(d["prefill"])
            steps = [StepEvent(**{**s, "tree": DraftTreeRecord(**s["tree"]) if s.get("tree") else None})
                     for s in d["steps"]]
            return cls(d["settings"], d["prompt"], pre, steps, {int(k): v for k, v in d["token_text"].items()},
                       list(d.get("timestamps", [])), list(d.get("thumbnails", [])), dict(d.get("meta", {})),
                       version, list(d.get("why", [])))
        except (KeyError, TypeError) as e:
            raise RecordError(f"the run record is incomplete or malformed ({e}).") from e


def _plain_step(ev: StepEvent) -> StepEvent:
    """The engine's StepEvent with plain ints, bools and strings (as it is saved and read back)."""
    return dataclasses.replace(ev, token_ids=[int(t) for t in ev.token_ids], from_draft=[bool(b) for b in ev.from_draft],
                               accept_length=int(ev.accept_length), pieces=[str(p) for p in ev.pieces],
                               added=[int(t) for t in ev.added])


def _ints(x: Any) -> list[int]:
    return [] if x is None else [int(v) for v in torch.as_tensor(x).reshape(-1).tolist()]


def prefill_to_dict(info: PrefillInfo) -> dict:
    """The engine's PrefillInfo as plain JSON data: counts, timings, the pruning method (None for vanilla)
    and its index sets and scores as lists, the token grid as (V, 3) nested lists."""
    pr = info.prune
    return {
        "num_prompt_tokens": int(info.num_prompt_tokens), "num_video_tokens": int(info.num_video_tokens),
        "num_draft_prompt_tokens": int(info.num_draft_prompt_tokens), "prefill_s": float(info.prefill_s),
        "prune_s": float(info.prune_s), "draft_prefill_s": float(info.draft_prefill_s),
        "frames_per_token": int(info.frames_per_token), "method": pr.method if pr is not None else None,
        "keep": _ints(pr.keep if pr else None), "stage1": _ints(pr.stage1 if pr else None),
        "stage2": _ints(pr.stage2 if pr else None),
        "forced": _ints(pr.forced) if pr is not None and pr.forced is not None else None,
        "scores": [float(v) for v in pr.scores.tolist()] if pr is not None and pr.scores is not None else None,
        "token_grid": None if info.token_grid is None else torch.as_tensor(info.token_grid).long().tolist(),
        "target_subtitle_tokens": int(info.target_subtitle_tokens),
        "draft_subtitle_tokens": int(info.draft_subtitle_tokens),
        "r_used": float(info.r_used), "r_reason": str(info.r_reason),
    }


def prefill_from_dict(d: dict) -> PrefillInfo:
    """Inverse of :func:`prefill_to_dict`: the PrefillInfo with its PruneResult (int64 / float32 tensors)."""
    lt = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
    prune = None
    if d.get("method") is not None:
        prune = PruneResult(lt(d["keep"]), lt(d["stage1"]), lt(d["stage2"]),
                            None if d.get("scores") is None else torch.tensor(d["scores"], dtype=torch.float32),
                            int(d["num_video_tokens"]), d["method"], None if d.get("forced") is None else lt(d["forced"]))
    grid = d.get("token_grid")
    return PrefillInfo(int(d["num_prompt_tokens"]), int(d["num_video_tokens"]), int(d["num_draft_prompt_tokens"]),
                       prune, float(d.get("prefill_s", 0.0)), float(d.get("prune_s", 0.0)),
                       float(d.get("draft_prefill_s", 0.0)),
                       None if grid is None else torch.tensor(grid, dtype=torch.long).reshape(-1, 3),
                       int(d.get("frames_per_token", 1)), int(d.get("target_subtitle_tokens", 0)),
                       int(d.get("draft_subtitle_tokens", 0)), float(d.get("r_used", 0.0)), str(d.get("r_reason", "")))


# --------------------------------------------------------------------------- two runs
def run_speedup(vanilla: RunRecord, method: RunRecord) -> float | None:
    """The decode speedup of ``method`` over ``vanilla`` on the same input
    (:func:`specvlm.analysis.metrics.speedup` of their decode times and token counts; None until both decoded).

    Source: docs/design.md §4.12 (speedup = vanilla decode time / method decode time on the same input).
    """
    return speedup(vanilla.decode_s, method.decode_s, vanilla_tokens=vanilla.num_generated,
                   method_tokens=method.num_generated)


@dataclass(frozen=True)
class Comparison:
    """How a speculative run compares with the vanilla run of the same input (plain, picklable data).

    Attributes:
        divergence: :class:`specvlm.analysis.metrics.Divergence` of the two outputs.
        vanilla_context, spec_context: a few tokens of text around the first divergence ("" when identical).
        dtype: the target's dtype name (sets the near-tie threshold).
        speedup_runs: the decode speedup of each timed pair of runs, the compared pair's first
            (:func:`run_speedup`; pairs that decoded nothing left out).
        greedy: both runs decoded greedily; sampled runs are equal only in distribution, so their
            divergence is reported but not classified.

    Source: docs/design.md §4.11 (report the first divergence), §4.12 (speedup).
    """

    divergence: Divergence
    vanilla_context: str = ""
    spec_context: str = ""
    dtype: str = ""
    speedup_runs: tuple[float, ...] = ()
    greedy: bool = True

    @property
    def identical(self) -> bool:
        return self.divergence.identical

    @property
    def speedup(self) -> float | None:
        """The compared pair's speedup, or the median over the timed pairs when there are several."""
        return median_speedup(self.speedup_runs)

    def to_json(self) -> dict[str, Any]:
        """The one comparison schema: ``identical``, ``divergence`` (None when identical, else ``index``,
        ``kind`` and ``margin`` (None for sampled runs), ``threshold``, ``dtype``), ``speedup`` (the median
        over the timed pairs) and ``speedup_runs`` (each pair's)."""
        d = self.divergence
        div = None if d.identical else {"index": d.index, "kind": d.kind if self.greedy else None,
                                        "margin": d.margin if self.greedy else None, "threshold": d.threshold,
                                        "dtype": self.dtype}
        s = self.speedup
        return {"identical": d.identical, "divergence": div, "speedup": None if s is None else round(s, 4),
                "speedup_runs": [round(r, 4) for r in self.speedup_runs]}


def compare_runs(vanilla: RunRecord, spec: RunRecord, dtype: Any, *,
                 more_speedups: Sequence[float | None] = (), greedy: bool = True, context: int = 3) -> Comparison:
    """Compare two finished runs of the same input: identity (classified by the target's logit margin
    where vanilla saw it, :func:`specvlm.analysis.metrics.compare_outputs`) and the decode speedup.

    Args:
        vanilla: the vanilla run (its steps carry the target's margins).
        spec: the speculative run.
        dtype: the target's dtype (torch dtype or name); one without a near-tie threshold reports any
            divergence as a mismatch.
        more_speedups: speedups of further timed pairs of the same runs (:func:`run_speedup`).
        greedy: both runs were greedy.
        context: tokens of text shown on each side of a divergence.

    Returns:
        Comparison.

    Source: docs/design.md §4.11-4.12.
    """
    try:
        div = compare_outputs(vanilla.token_ids, spec.token_ids, vanilla.margins, dtype)
    except ValueError:  # a dtype without a near-tie threshold: any divergence is a mismatch
        div = compare_outputs(vanilla.token_ids, spec.token_ids, [], "float32")
    near = ["", ""]
    if not div.identical:
        i = int(div.index)
        near = ["".join(r.token_texts()[max(0, i - context):i + context]) for r in (vanilla, spec)]
    runs = [r for r in (run_speedup(vanilla, spec), *more_speedups) if r is not None]
    return Comparison(div, near[0], near[1], str(dtype).removeprefix("torch."), tuple(runs), greedy)
