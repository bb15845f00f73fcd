"""Typed inputs and results shared by the library, the CLI, the app and the benchmark."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch



class SubtitlePromptError(ValueError):
    """The subtitle transcript could not be placed in the prompt (bad mode, unexpected tokenization)."""


@dataclass
class VideoClip:
    """Sampled frames of one video.

    Attributes:
        frames: uint8 array (T, H, W, 3), RGB.
        timestamps: float64 array (T,), seconds from the start of the clip.
        path: the source file, or None for in-memory clips.
        native_fps: the stream's average frame rate (frames/s).
        total_frames: frames in the stream.
        duration: stream duration in seconds.
        notes: human-readable notes on limits applied (frames capped, downscaled, ...).
    """

    frames: np.ndarray
    timestamps: np.ndarray
    path: str | None = None
    native_fps: float = 0.0
    total_frames: int = 0
    duration: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def sample_fps(self) -> float:
        """Effective rate of the sampled frames (frames/s); native fps when T < 2."""
        if len(self.timestamps) >= 2:
            span = float(self.timestamps[-1] - self.timestamps[0])
            if span > 0:
                return (len(self.timestamps) - 1) / span
        return float(self.native_fps or 1.0)


@dataclass
class PruneResult:
    """Which video tokens the draft keeps (docs/design.md §4.3-4.6).

    Attributes:
        keep: int64 (K,), sorted unique indices into the V video tokens.
        stage1: int64 (k1,), sorted; Stage I (verifier-guided top-p) picks. Empty for
            methods without a score stage.
        stage2: int64 (K - k1,), sorted; Stage II (spatially uniform) picks. Empty for
            single-stage methods.
        scores: float32 (V,), text-to-video attention scores (or None if not computed).
        num_video_tokens: V.
        method: the pruning method name.
        forced: int64 (F,) sorted, tokens kept because the caller forced them (``force_keep``),
            or None; they count against K and are in neither stage.
    """

    keep: torch.Tensor
    stage1: torch.Tensor
    stage2: torch.Tensor
    scores: torch.Tensor | None
    num_video_tokens: int
    method: str
    forced: torch.Tensor | None = None

    @property
    def num_kept(self) -> int:
        """K, the number of kept video tokens."""
        return int(self.keep.numel())


@dataclass
class DraftTreeRecord:
    """What one verify step drafted and accepted (for inspection).

    Attributes:
        tokens: drafted token ids, node order (N,).
        parents: parent node index per node, -1 for children of the root (N,).
        draft_logprobs: cumulative draft log-probability per node (N,).
        accepted_nodes: node indices of the accepted path, root-first.
        target_token: the target's token after the accepted path (bonus/correction).
    """

    tokens: list[int]
    parents: list[int]
    draft_logprobs: list[float]
    accepted_nodes: list[int]
    target_token: int


@dataclass
class StepEvent:
    """One streamed decoding step.

    For speculative decoding one event per verify step; for vanilla one per
    generated token. The first event of every stream (step 0) carries the token
    produced by the target's prefill, with ``accept_length`` 0.

    Attributes:
        step: 0 for the prefill token, then 1, 2, ... per verify/decode step.
        token_ids: new token ids emitted at this step (after EOS/max truncation).
        accept_length: draft tokens accepted at this step (0..depth); the rest of
            ``token_ids`` came from the target.
        from_draft: per entry of ``token_ids``, True if it was an accepted draft token.
        text: decoded text delta for ``token_ids``.
        draft_ms: time drafting the tree (ms), 0 for vanilla; with re-selection on, plus its cost at this step
            (scoring the diverging row, adding tokens to the draft).
        verify_ms: time of the target forward (ms).
        tree_size: drafted nodes verified at this step (0 for vanilla).
        elapsed_s: decode wall time since the first decode step began (s), excludes prefill.
        num_generated: tokens generated so far including this step.
        tree: the drafted tree, when recorded.
        margin: the target's top-1 minus top-2 logit margin (logit units) for this step's token, on
            vanilla steps and on step 0 (the prefill's token); None on speculative verify steps.
            :func:`specvlm.analysis.metrics.compare_outputs` uses it to tell near-ties from mismatches.
        pieces: the text delta of each entry of ``token_ids`` (they join to ``text``; an entry that ends in
            an incomplete UTF-8 sequence has "" and the next one carries it), or [] when not split.
        added: video-token indices (the index space of :attr:`PruneResult.keep`) that re-selection added to
            the draft after this step's verify (step 0: before the first draft; :class:`specvlm.config.ReselectConfig`),
            ascending; [] otherwise.
        unseen_share: at a step re-selection measured (a refused one, or any with ``trigger="every"``), the
            share of the target's video attention from the measured position on video tokens the draft
            lacked, in [0, 1]; None where not measured.
    """

    step: int
    token_ids: list[int]
    accept_length: int
    from_draft: list[bool]
    text: str
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    tree_size: int = 0
    elapsed_s: float = 0.0
    num_generated: int = 0
    tree: DraftTreeRecord | None = None
    margin: float | None = None
    pieces: list[str] = field(default_factory=list)
    added: list[int] = field(default_factory=list)
    unseen_share: float | None = None


@dataclass
class PrefillInfo:
    """Emitted once per request before any StepEvent (``stream`` yields it first).

    Attributes:
        num_prompt_tokens: L, target prompt length in tokens.
        num_video_tokens: V.
        num_draft_prompt_tokens: draft prompt length after pruning.
        prune: the PruneResult (None for vanilla).
        prefill_s: target prefill time incl. scoring (s).
        prune_s: pruning time (s).
        draft_prefill_s: draft prefill time (s).
        token_grid: int64 (V, 3) (frame, row, col) per video token in the merged grid.
        frames_per_token: frames covered by one video token (2 for Qwen2.5-VL).
        target_subtitle_tokens: subtitle transcript tokens in the target's prompt.
        draft_subtitle_tokens: subtitle transcript tokens in the draft's prompt.
        r_used: the drop rate r the pruning used (0.0 without pruning): ``PruneConfig.drop_rate``, or the
            clip's own r with ``PruneConfig.adaptive_r``.
        r_reason: one sentence on why that r ("" without pruning).
    """

    num_prompt_tokens: int
    num_video_tokens: int
    num_draft_prompt_tokens: int
    prune: PruneResult | None
    prefill_s: float
    prune_s: float
    draft_prefill_s: float
    token_grid: torch.Tensor | None = None
    frames_per_token: int = 1
    target_subtitle_tokens: int = 0
    draft_subtitle_tokens: int = 0
    r_used: float = 0.0
    r_reason: str = ""


@dataclass
class DecodeResult:
    """Everything about one finished request (docs/design.md §4.12).

    Attributes:
        token_ids: generated ids (excluding the prompt).
        text: decoded text.
        method: decode method.
        accept_lengths: accepted draft tokens per verify step.
        tau: τ, mean accepted length (excludes the bonus token); 0 for vanilla.
        tokens_per_target_forward: generated tokens / target forwards after prefill (τ + 1 on average).
        decode_s: decode time (s), excludes prefill, scoring, pruning and draft prefill.
        total_s: the stream's wall time (s), including them.
        tokens_per_s: tokens of the decode steps per second of decode time, (n - 1) / decode_s.
        (tau, tokens_per_target_forward, decode_s and tokens_per_s are
        :func:`specvlm.engine.measures.summarize` of the events.)
        draft_s: total drafting time (s).
        verify_s: total target verify/decode time (s).
        prefill: the PrefillInfo.
        steps: all StepEvents.
        margins: vanilla only: per generated token, the target's top-1 minus top-2 logit margin
            (logit units; :func:`specvlm.analysis.metrics.compare_outputs`); empty for speculative methods.
    """

    token_ids: list[int]
    text: str
    method: str
    accept_lengths: list[int]
    tau: float
    tokens_per_target_forward: float
    decode_s: float
    total_s: float
    tokens_per_s: float
    draft_s: float
    verify_s: float
    prefill: PrefillInfo
    steps: list[StepEvent]
    margins: list[float] = field(default_factory=list)

    @property
    def num_video_tokens(self) -> int:
        return self.prefill.num_video_tokens

    @property
    def num_kept(self) -> int:
        p = self.prefill.prune
        return p.num_kept if p is not None else self.prefill.num_video_tokens


@dataclass
class ModelInputs:
    """One request's prompt, ready for prefill.

    Attributes:
        input_ids: int64 (1, L), the full target prompt with video placeholders.
        positions: int64 (R, L) position ids; R = 3 for M-RoPE (Qwen2.5-VL), 1 otherwise.
        video_index: int64 (V,), sequence positions of the video tokens, ascending.
        token_grid: int64 (V, 3), (frame, row, col) per video token in the merged grid
            (frame = temporal group index; row = col = -1 for a newline token).
        frames_per_token: frames covered by one video token along time.
        vision: processor tensors the video encoder needs (family specific).
        prompt_text: the chat-templated prompt string.
        subtitle_mask: bool (L,) positions of the subtitle transcript's tokens, or None
            (:mod:`specvlm.text.prompting`).
        subtitle_mode: who sees the transcript: ``both``, ``target``, ``draft`` or ``none``.
        subtitle_text: the transcript block as placed in the prompt ("" without subtitles).
        force_keep: int64 (F,) video-token indices the draft must always keep (e.g. tokens
            covering on-screen text), or None; see :func:`specvlm.spec.pruning.select_video_tokens`.
        processor_kwargs: the video keyword arguments the adapter gave the processor (e.g. the clip's
            ``video_metadata``), so another caller (HF ``generate()`` in the benchmark) can reproduce
            the same ids; empty when the adapter does not record them.
        draft_inputs: the draft's own prompt when its video geometry differs from the target's
            (:attr:`specvlm.models.pair.ModelPair.draft_processor`), else None: the draft reads this
            prompt, with the kept set carried to its token grid (:func:`specvlm.spec.grid.map_keep`).
    """

    input_ids: torch.Tensor
    positions: torch.Tensor
    video_index: torch.Tensor
    token_grid: torch.Tensor
    frames_per_token: int
    vision: dict[str, Any] = field(default_factory=dict)
    prompt_text: str = ""
    subtitle_mask: torch.Tensor | None = None
    subtitle_mode: str = "none"
    subtitle_text: str = ""
    force_keep: torch.Tensor | None = None
    processor_kwargs: dict[str, Any] = field(default_factory=dict)
    draft_inputs: "ModelInputs | None" = None

    @property
    def num_video_tokens(self) -> int:
        return int(self.video_index.numel())

    @property
    def num_subtitle_tokens(self) -> int:
        """Tokens of the subtitle transcript in this prompt (0 without subtitles)."""
        return 0 if self.subtitle_mask is None else int(self.subtitle_mask.sum())

    def draft_drop_mask(self) -> torch.Tensor | None:
        """Bool (L,) non-video tokens the draft's prefill skips (the transcript in ``target`` mode)."""
        if self.subtitle_mode == "target" and self.subtitle_mask is not None:
            return self.subtitle_mask
        return None

    def for_target(self) -> "ModelInputs":
        """The inputs the target sees: without the transcript in ``draft`` mode, else ``self``.

        The transcript is contiguous text, so every position after it is shifted back by its length:
        the result equals the prompt prepared without subtitles (same ids and positions).

        Raises:
            SubtitlePromptError: the transcript's tokens overlap the video tokens.
        """
        mask = self.subtitle_mask
        if self.subtitle_mode != "draft" or mask is None or not bool(mask.any()):
            return self
        keep = ~mask
        idx = keep.nonzero().flatten()
        n = int(mask.sum())
        last = int(mask.nonzero().max())
        pos = self.positions.clone()
        pos[:, last + 1:] -= n
        vid_keep = keep[self.video_index]
        if not bool(vid_keep.all()):
            raise SubtitlePromptError("subtitle tokens overlap the video tokens.")
        new_index = torch.cumsum(keep.long(), 0)[self.video_index] - 1
        return replace(self, input_ids=self.input_ids[:, idx], positions=pos[:, idx], video_index=new_index,
                       prompt_text=self.prompt_text.replace(self.subtitle_text, "", 1), subtitle_mask=None,
                       subtitle_mode="none", subtitle_text="")

    @property
    def next_position(self) -> int:
        """Position of the first generated token: last prompt position + 1.

        Matches ``generate()`` (tested on long, low-fps clips where temporal M-RoPE positions of the
        video exceed the text positions after it); not max + 1 (docs/design.md §7).
        """
        return int(self.positions[0, -1]) + 1


class Stopped(Exception):
    """A ``should_stop`` callback returned True while work could not simply end early: video reading
    (:func:`specvlm.video.load_video` raises it between frames) or a prefill (the engine raises it
    between layers; :func:`specvlm.engine.stream.stream` catches it and ends the stream). Not a user
    error, so not a ValueError."""
