"""Benchmark: every decoding method and its peers on the same model pair and inputs.

``python -m specvlm bench`` (registered by :func:`add_parser`) and the Python API
(:func:`run_bench`) run, per input, a warm-up of every method and then ``repeats``
interleaved rounds (A B C A B C ..., so machine drift hits every method alike). Per
method the report gives τ, tokens per target forward, decode tokens/s, the decode
speedup over our vanilla as the median (min/max) of per-round ratios, end-to-end
time, draft and verify time per step, KV lengths, peak memory, and whether every
run was token-identical to vanilla (the first divergence index when not).

Conventions (DESIGN 4.12):
    * Decode time starts when the first token is emitted (after prefill, scoring,
      pruning and draft prefill) and ends at the last token. Decode tokens/s =
      tokens emitted after the first emission / decode time, for our methods and
      the Hugging Face peers alike. Speedup = method tokens/s / vanilla tokens/s in
      the same round (= vanilla decode time / method decode time for the same
      generated length).
    * Hugging Face peers run stock ``generate()`` with transformers' ``sdpa``
      attention (the models are switched for the call and back) and are timed with
      a streamer: decode time runs from the streamer's first callback with generated
      tokens (after prefill and the vision encoder) to its last callback.
    * Peak memory is measured in the first warm-up round, which is not timed
      (:class:`specvlm.memory.MemoryProbe`): on CUDA ``torch.cuda.max_memory_allocated``
      after a reset; on a CPU the peak of tensor memory held by torch's CPU allocator,
      from the profiler's allocation events (exact and repeatable, unlike the resident
      set, which keeps freed blocks). ``delta`` subtracts the value at the start of the
      run (KV caches + activations); on a CPU ``peak`` = resident set at the start + delta.

Source: SpecVLM (arXiv 2508.16201) Sec. 4 (τ, speedup over vanilla on the same
input, fixed-length fairness setting); Leviathan et al. 2023; HF assisted
generation and prompt lookup decoding (transformers ``generate``).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import logging
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from specvlm.fast import set_text_attn_implementation, text_attn_implementation
from specvlm.config import DECODE_METHODS, PRUNE_METHODS, DecodeConfig, VideoConfig
from specvlm.memory import MemoryProbe, rss_mb
from specvlm.metrics import first_divergence
from specvlm.types import VideoClip

log = logging.getLogger(__name__)

PEERS = ("hf", "hf-assisted", "prompt-lookup")
"""Hugging Face peers: greedy ``generate()``, assisted generation with our draft, prompt lookup."""
SELF = ":self"
"""Suffix that runs a speculative method with the target as its own draft (Self-SD)."""
DEFAULT_METHODS = ("vanilla", "none", "random", "uniform", "frame", "attention", "specvlm", "specvlm:self",
                   "hf", "hf-assisted", "prompt-lookup")
LABELS = {"vanilla": "vanilla (ours)", "none": "SD-Tree", "random": "SD-Rand", "specvlm": "SpecVLM",
          "hf": "HF generate", "hf-assisted": "HF assisted", "prompt-lookup": "HF prompt lookup"}
HF_ATTENTION = "sdpa"
"""Attention the Hugging Face peers run with (stock transformers), restored afterwards."""
HF_TIMING = ("streamer: decode time = first to last streamer callback with generated tokens (excludes prefill "
             "and the vision encoder); tokens/s counts the tokens after the first callback")

RUN_FIELDS = ("status", "error", "note", "num_generated", "decode_s", "decode_tokens_per_s", "e2e_s", "prefill_s",
              "tau", "tokens_per_target_forward", "target_forwards", "draft_ms_per_step", "verify_ms_per_step",
              "num_video_tokens", "num_kept", "target_kv_tokens", "draft_kv_tokens", "target_kv_mb", "draft_kv_mb",
              "peak_memory_mb", "peak_memory_delta_mb", "identical", "first_divergence")
INT_FIELDS = {"num_generated", "target_forwards", "num_video_tokens", "num_kept", "target_kv_tokens",
              "draft_kv_tokens"}
METHOD_FIELDS = ("input", "method", "label", "draft_mode", "repeats") + RUN_FIELDS + (
    "speedup", "speedup_min", "speedup_max", "speedups", "verify_vs_decode_step", "text")
"""Keys of every per-method record in the JSON report (None where not applicable)."""


class BenchError(ValueError):
    """Bad benchmark settings (unknown method, no inputs, ...); the message says what to change."""


# --------------------------------------------------------------------------- settings and inputs
@dataclass
class BenchInput:
    """One benchmark input.

    Attributes:
        name: display name (file name, ``synthetic-4096``, dataset sample id).
        clip: sampled frames.
        prompt: user text.
        reference: reference answer (datasets), or None.
        sweep: True for inputs of a length sweep.
    """

    name: str
    clip: VideoClip
    prompt: str
    reference: str | None = None
    sweep: bool = False


@dataclass
class BenchSettings:
    """How to benchmark.

    Attributes:
        methods: method names: ``vanilla``, a pruning method (speculative), a pruning method +
            ``:self`` (Self-SD with the target's weights), or a peer in :data:`PEERS`.
        config: base decoding settings (pruning, tree, budget, stop_at_eos); ``method`` is replaced.
        repeats: measured rounds per input (>= 1).
        warmup: unmeasured rounds per input before them (>= 0).
        prompt_lookup_tokens: ``prompt_lookup_num_tokens`` for the prompt-lookup peer.
        step_costs: also time isolated verify forwards of 1..``VERIFY_GOAL_TOKENS`` + 1 tokens
            against a decode step on the target at the largest input's prompt length
            (:func:`specvlm.stepcost.verify_cost_curve`; the verify goal is checked on it).

    Raises:
        BenchError: unknown method or bad counts (from :meth:`validate`).
    """

    methods: tuple[str, ...] = DEFAULT_METHODS
    config: DecodeConfig = field(default_factory=lambda: DecodeConfig(max_new_tokens=128))
    repeats: int = 3
    warmup: int = 1
    prompt_lookup_tokens: int = 10
    step_costs: bool = True

    def validate(self) -> None:
        """Raise :class:`BenchError` for unknown methods or counts out of range."""
        for m in self.methods:
            base = m[: -len(SELF)] if m.endswith(SELF) else m
            ok = m in PEERS or m in DECODE_METHODS or (m.endswith(SELF) and base in PRUNE_METHODS)
            if not ok:
                raise BenchError(f"method {m!r} is unknown: use vanilla, one of {', '.join(PRUNE_METHODS)} "
                                 f"(optionally with {SELF} for Self-SD), or a peer: {', '.join(PEERS)}.")
        if self.repeats < 1 or self.warmup < 0:
            raise BenchError(f"repeats={self.repeats} and warmup={self.warmup}: use repeats >= 1, warmup >= 0.")


def parse_methods(text: str) -> tuple[str, ...]:
    """Comma list -> method tuple with ``vanilla`` first (speedups need it); ``all`` = defaults.

    Raises:
        BenchError: an unknown method, or an empty list.
    """
    items = [m.strip() for m in text.split(",") if m.strip()]
    if not items:
        raise BenchError(f"--methods {text!r} names no method: give a comma list (e.g. specvlm,none) or 'all'.")
    if items == ["all"]:
        items = list(DEFAULT_METHODS)
    out = ["vanilla"] + [m for m in dict.fromkeys(items) if m != "vanilla"]
    BenchSettings(methods=tuple(out)).validate()
    return tuple(out)


def parse_int_list(text: str) -> list[int]:
    """``"1024,2048"`` -> [1024, 2048]; raises BenchError on non-positive or non-integer items."""
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise BenchError(f"{text!r} is not a comma-separated list of integers.") from exc
    if not vals or min(vals) < 1:
        raise BenchError(f"{text!r}: give positive integers, e.g. 1024,2048,4096.")
    return vals


def _synthetic_frames(num_frames: int, side: int, seed: int) -> np.ndarray:
    """uint8 (T, side, side, 3) frames from the procedural generator (moving shapes)."""
    from specvlm import synth

    spec = synth.SceneSpec(num_frames=max(2, num_frames), height=max(MIN_SYNTHETIC_SIDE, side),
                            width=max(MIN_SYNTHETIC_SIDE, side))
    frames, _ = synth.generate(seed, spec)
    return frames[:num_frames]


def max_video_tokens(pair: Any) -> int | None:
    """The target's ``max_position_embeddings`` (tokens), or None where its config does not say."""
    cfg = pair.target.config
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    n = getattr(cfg, "max_position_embeddings", None)
    return int(n) if n else None


def synthetic_clip(pair: Any, num_tokens: int, *, side: int = 224, seed: int = 0, fps: float = 2.0) -> VideoClip:
    """A generated clip sized to give about ``num_tokens`` video tokens with the pair's processor.

    Two small probe clips (2k and 4k frames, k = frames per video token along time) give
    the processor's video tokens per frame and fixed overhead; the frame count is solved
    from them and rounded to a multiple of k.

    Args:
        pair: the ModelPair (its adapter and processor decide the token count).
        num_tokens: wanted video tokens V (>= 1).
        side: frame side in px (the processor may resize).
        seed: scene seed.
        fps: frame rate of the clip (frames/s).

    Returns:
        VideoClip of T frames, uint8 (T, side, side, 3).

    Raises:
        BenchError: the processor's token count does not grow with the frame count; ``num_tokens``
            below the smallest clip (one frame group) or at/above the target's
            ``max_position_embeddings``; ``side`` under :data:`MIN_SYNTHETIC_SIDE`.
    """
    from specvlm.video import frames_to_clip

    if side < MIN_SYNTHETIC_SIDE:
        raise BenchError(f"synthetic frame side {side} px: give at least {MIN_SYNTHETIC_SIDE} px.")
    limit = max_video_tokens(pair)
    if limit is not None and num_tokens >= limit:
        raise BenchError(f"{num_tokens} video tokens: the target's max_position_embeddings is {limit}; ask for "
                         "fewer video tokens (leave room for the prompt and the answer).")
    k = max(1, int(pair.frames_per_token))
    counts = []
    for t in (2 * k, 4 * k):
        clip = frames_to_clip(_synthetic_frames(t, side, seed), fps)
        counts.append(pair.adapter.prepare(pair.processor, pair.target, clip, "probe").num_video_tokens)
    per_frame = (counts[1] - counts[0]) / (2 * k)
    if per_frame <= 0:
        raise BenchError("the processor's video token count does not grow with the number of frames.")
    base = counts[0] - per_frame * 2 * k
    smallest = int(round(base + per_frame * k))
    if num_tokens < smallest:
        raise BenchError(f"{num_tokens} video tokens: the smallest generated clip for this model gives {smallest} "
                         f"({k} frame{'s' if k > 1 else ''} of {side}x{side} px); ask for at least {smallest}"
                         + (", or a smaller --synthetic-side." if side > MIN_SYNTHETIC_SIDE else "."))
    frames = max(k, int(round((num_tokens - base) / per_frame / k)) * k)
    log.info("synthetic clip: %d frames of %dx%d px for ~%d video tokens", frames, side, side, num_tokens)
    return frames_to_clip(_synthetic_frames(frames, side, seed), fps, path=f"synthetic-{num_tokens}")


# --------------------------------------------------------------------------- measurement helpers
def kv_mb(model: Any, tokens: int) -> float:
    """KV-cache size of ``tokens`` tokens for ``model`` in MiB: 2 * layers * kv_heads * head_dim * bytes.

    Args:
        model: a transformers model whose text config has the usual attention fields.
        tokens: cached tokens.
    """
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    heads = int(cfg.num_attention_heads)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    nbytes = model.get_input_embeddings().weight.element_size()
    return 2 * int(cfg.num_hidden_layers) * kv_heads * head_dim * nbytes * tokens / 2**20


def _empty_run(status: str = "ok") -> dict:
    return {k: None for k in RUN_FIELDS} | {"status": status, "token_ids": []}


def _label(method: str, pair: Any) -> tuple[str, str | None]:
    """(display label, draft mode) for a method on this pair."""
    base = method[: -len(SELF)] if method.endswith(SELF) else method
    label = LABELS.get(base, base)
    if method in ("vanilla", "hf", "prompt-lookup"):
        return label, None
    mode = "Self-SD" if method.endswith(SELF) or pair.self_sd else "Std-SD"
    return f"{label} ({mode})", mode


# --------------------------------------------------------------------------- our methods
def self_sd_pair(pair: Any) -> Any:
    """The same target drafting for itself (weights shared, no copy)."""
    from specvlm.models import pair_from_models

    if pair.self_sd:
        return pair
    return pair_from_models(pair.target, pair.processor, name=f"{pair.name} (Self-SD)")


def _memory_probe(pair: Any, memory: bool | float) -> MemoryProbe | contextlib.nullcontext:
    """A probe when ``memory`` is truthy (a float: the CPU base in MiB, see MemoryProbe.base_mb)."""
    if memory is False or memory is None:
        return contextlib.nullcontext()
    return MemoryProbe(pair.device, base_mb=None if memory is True else float(memory))


def _memory_fields(mem: MemoryProbe | None) -> dict:
    if not isinstance(mem, MemoryProbe):
        return {"peak_memory_mb": None, "peak_memory_delta_mb": None}
    return {"peak_memory_mb": mem.peak_mb, "peak_memory_delta_mb": mem.delta_mb}


def run_ours(pair: Any, method: str, inputs: Any, config: DecodeConfig, memory: bool | float = False) -> dict:
    """One run of vanilla or a speculative method through :func:`specvlm.decoding.generate`.

    Args:
        pair: the ModelPair (a ``:self`` method uses :func:`self_sd_pair`).
        method: ``vanilla``, a pruning method, or one with the ``:self`` suffix.
        inputs: ModelInputs prepared once per input (the processor is not timed).
        config: decoding settings; ``method`` is replaced.
        memory: measure peak memory (:class:`specvlm.memory.MemoryProbe`; on a CPU it runs the
            torch profiler, which slows the run: use it in an untimed round); a float is also the
            CPU base in MiB that the peak is stated over. False: the memory fields are None.

    Returns:
        dict with every key of :data:`RUN_FIELDS` plus ``token_ids`` (times in s and ms as named).
    """
    from specvlm.decoding import generate

    base = method[: -len(SELF)] if method.endswith(SELF) else method
    run_pair = self_sd_pair(pair) if method.endswith(SELF) else pair
    cfg = replace(config, method=base)
    with _memory_probe(pair, memory) as mem:
        res = generate(run_pair, None, "", cfg, inputs=inputs)
    info, n = res.prefill, len(res.token_ids)
    steps = len(res.accept_lengths) if cfg.speculative else max(len(res.steps) - 1, 0)
    d_len = info.num_draft_prompt_tokens if cfg.speculative else None
    out = _empty_run()
    out.update(
        token_ids=res.token_ids, num_generated=n, decode_s=res.decode_s, text=res.text,
        decode_tokens_per_s=(n - 1) / res.decode_s if res.decode_s > 0 and n > 1 else None,
        e2e_s=res.total_s, prefill_s=info.prefill_s + info.prune_s + info.draft_prefill_s,
        tau=res.tau if cfg.speculative else None, tokens_per_target_forward=res.tokens_per_target_forward,
        target_forwards=steps, num_video_tokens=info.num_video_tokens, num_kept=res.num_kept,
        draft_ms_per_step=res.draft_s * 1e3 / steps if steps and cfg.speculative else None,
        verify_ms_per_step=res.verify_s * 1e3 / steps if steps else None,
        target_kv_tokens=info.num_prompt_tokens, draft_kv_tokens=d_len,
        target_kv_mb=kv_mb(pair.target, info.num_prompt_tokens + n),
        draft_kv_mb=kv_mb(run_pair.draft, d_len + n) if d_len is not None else None,
        **_memory_fields(mem),
    )
    return out


# --------------------------------------------------------------------------- Hugging Face peers
class _TimingStreamer:
    """A transformers streamer that records when generated tokens arrive (s, perf_counter)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.calls: list[tuple[float, int]] = []
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate() first echoes the prompt
            self._prompt_seen = True
            return
        self.calls.append((time.perf_counter(), int(value.numel())))

    def end(self) -> None:
        pass


def processor_inputs(pair: Any, clip: VideoClip, inputs: Any) -> dict:
    """The processor output HF ``generate()`` needs, built exactly like the adapter's.

    The adapter's ``prepare`` pads an odd frame count for models with temporal patches
    and passes the real frame timing as ``video_metadata`` (DESIGN 7); both call
    styles are tried and the one whose ``input_ids`` equal ``inputs.input_ids`` wins.

    Raises:
        BenchError: no call style reproduces the adapter's token ids.
    """
    frames = np.asarray(clip.frames)
    k = max(1, int(pair.frames_per_token))
    if len(frames) % k:
        frames = np.concatenate([frames] + [frames[-1:]] * (k - len(frames) % k), axis=0)
    meta = {"fps": float(clip.sample_fps) or 1.0, "total_num_frames": len(frames),
            "frames_indices": list(range(len(frames)))}
    styles = ({"video_metadata": [meta], "do_sample_frames": False, "cap_pixels_per_frame": False},
              {"video_metadata": [meta], "do_sample_frames": False}, {})
    for kw in styles:
        try:
            enc = pair.processor(text=[inputs.prompt_text], videos=[frames], return_tensors="pt", **kw)
        except (TypeError, ValueError) as exc:
            log.debug("processor call style %s failed: %s", list(kw), exc)
            continue
        if torch.equal(enc["input_ids"], inputs.input_ids):
            return dict(enc)
    raise BenchError("the processor's token ids differ from the adapter's: cannot feed HF generate() the same input.")


def _hf_kwargs(pair: Any, method: str, config: DecodeConfig, settings: BenchSettings) -> tuple[dict, str | None]:
    """generate() keyword arguments for a peer, and a note on what was run."""
    tok = pair.processor.tokenizer
    kw: dict = {"max_new_tokens": config.max_new_tokens, "do_sample": False,
                "pad_token_id": tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id}
    if not config.stop_at_eos:
        kw["eos_token_id"] = None  # fixed length: never stop, and never suppress EOS logits
    note = None
    if method == "hf-assisted":
        kw["assistant_model"] = pair.draft
        note = "assistant = " + ("the target itself (Self-SD pair)" if pair.self_sd else "our draft") + \
               ", HF default schedule (num_assistant_tokens, confidence threshold)"
    elif method == "prompt-lookup":
        kw["prompt_lookup_num_tokens"] = settings.prompt_lookup_tokens
        note = f"prompt_lookup_num_tokens={settings.prompt_lookup_tokens}"
    return kw, note


def _hf_generate(pair: Any, enc: dict, kw: dict) -> tuple[Any, _TimingStreamer, int | None]:
    """Run target.generate with a timing streamer and a forward counter (None for Self-SD assisted)."""
    model = pair.target
    dev = pair.device
    count = [0]
    hook = None
    if kw.get("assistant_model") is not model:
        hook = model.register_forward_hook(lambda *a: count.__setitem__(0, count[0] + 1))
    streamer = _TimingStreamer(dev)
    assistant = kw.get("assistant_model")
    saved = copy.deepcopy(assistant.generation_config) if assistant is not None else None
    models = list({id(m): m for m in (model, assistant) if m is not None}.values())
    impls = [(m, text_attn_implementation(m)) for m in models]
    try:
        for m in models:  # stock transformers attention for the peers, whatever the engine uses
            set_text_attn_implementation(m, HF_ATTENTION)
        feed = {k: v.to(dev) if torch.is_tensor(v) else v for k, v in enc.items()}
        out = model.generate(**feed, **kw, streamer=streamer)
    finally:
        if hook is not None:
            hook.remove()
        for m, impl in impls:
            set_text_attn_implementation(m, impl)
        if assistant is not None:
            assistant.generation_config = saved  # HF's heuristic schedule mutates it across calls
    return out, streamer, (count[0] if hook is not None else None)


_PEER_FAILURES_LOGGED: set[tuple[str, str]] = set()


def run_hf(pair: Any, method: str, enc: dict | Exception, config: DecodeConfig, settings: BenchSettings,
           memory: bool | float = False) -> dict:
    """One run of a Hugging Face peer (see :data:`PEERS`) on the same processor output.

    Args:
        pair: the ModelPair; the peer runs ``pair.target.generate`` (assistant: ``pair.draft``).
        method: one of :data:`PEERS`.
        enc: :func:`processor_inputs` output for this input, or the exception it raised.
        config: budget and stop_at_eos (fixed length passes ``eos_token_id=None``).
        settings: prompt-lookup size.
        memory: measure peak memory (see :func:`run_ours`).

    Errors (e.g. a peer that cannot handle video inputs) are caught: the run gets
    ``status="error"`` and ``error`` says why. When HF refuses our draft as assistant
    because the LM-head sizes differ (padded vocabularies), the run is retried as
    Universal Assisted Decoding with the same tokenizer on both sides, and ``note`` says so.

    Returns:
        dict with every key of :data:`RUN_FIELDS` plus ``token_ids``. ``prefill_s`` is the
        time to the first streamed token; ``tau`` (assisted only) is tokens per target
        forward - 1, counted with a forward hook (None when the assistant is the target).
    """
    kw, note = _hf_kwargs(pair, method, config, settings)
    try:
        if isinstance(enc, Exception):
            raise enc
        with _memory_probe(pair, memory) as mem:
            t0 = time.perf_counter()
            try:
                out, st, forwards = _hf_generate(pair, enc, kw)
            except ValueError as exc:
                if method != "hf-assisted" or "different tokenizers" not in str(exc):
                    raise
                tok = pair.processor.tokenizer
                kw.update(tokenizer=tok, assistant_tokenizer=tok)
                note = (note or "") + "; HF saw different vocab sizes and ran Universal Assisted Decoding"
                t0 = time.perf_counter()
                out, st, forwards = _hf_generate(pair, enc, kw)
            e2e = time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001 - a failing peer is reported, not fatal
        if (method, str(exc)) not in _PEER_FAILURES_LOGGED:  # once per error, not once per round
            _PEER_FAILURES_LOGGED.add((method, str(exc)))
            log.warning("%s failed: %s", method, exc)
        why = f"{exc.__class__.__name__}: {str(exc)[:300]}"
        if method == "prompt-lookup" and "do not match" in str(exc):
            why += (" (prompt lookup copies n-grams of the prompt, video placeholder ids included, into its "
                    "candidates; the model then counts more video tokens than there are video features)")
        return _empty_run("error") | {"error": why, "note": note}
    rec = _hf_record(pair, out, int(enc["input_ids"].shape[1]), st, forwards, t0, e2e, mem)
    if method != "hf-assisted" and rec["tokens_per_target_forward"] is not None:
        rec["tau"] = None
    return rec | {"note": note}


def _hf_record(pair: Any, out: torch.Tensor, prompt_len: int, st: _TimingStreamer, forwards: int | None,
               t0: float, e2e: float, mem: MemoryProbe | None) -> dict:
    """Turn one HF generate() call into a run record (see :func:`run_hf`)."""
    ids = out[0, prompt_len:].tolist()
    n = len(ids)
    decode_s = st.calls[-1][0] - st.calls[0][0] if len(st.calls) > 1 else 0.0
    after_first = n - st.calls[0][1] if st.calls else 0
    tptf = after_first / (forwards - 1) if forwards and forwards > 1 else None
    rec = _empty_run()
    rec.update(
        token_ids=ids, num_generated=n, decode_s=decode_s,
        text=pair.processor.tokenizer.decode(ids, skip_special_tokens=True),
        decode_tokens_per_s=after_first / decode_s if decode_s > 0 and after_first > 0 else None,
        e2e_s=e2e, prefill_s=st.calls[0][0] - t0 if st.calls else None,
        target_forwards=(forwards - 1) if forwards else None, tokens_per_target_forward=tptf,
        tau=(tptf - 1) if tptf is not None else None,
        target_kv_tokens=prompt_len, target_kv_mb=kv_mb(pair.target, prompt_len + n),
        **_memory_fields(mem),
    )
    return rec


# --------------------------------------------------------------------------- driver
def run_method(pair: Any, method: str, inp: BenchInput, inputs: Any, settings: BenchSettings,
               enc: dict | Exception | None = None, memory: bool | float = False) -> dict:
    """One run of any method on one input; exceptions become ``status="error"`` records.

    Args:
        inputs: the adapter's ModelInputs for ``inp`` (our methods).
        enc: the processor output for HF peers (computed here when None).
        memory: measure peak memory in this run (untimed rounds only: see :func:`run_ours`).
    """
    if method in PEERS:
        if enc is None:
            enc = _hf_inputs(pair, inp, inputs)
        return run_hf(pair, method, enc, settings.config, settings, memory=memory)
    try:
        return run_ours(pair, method, inputs, settings.config, memory=memory)
    except Exception as exc:  # noqa: BLE001 - reported in the table, the benchmark goes on
        log.exception("%s failed on %s", method, inp.name)
        return _empty_run("error") | {"error": f"{exc.__class__.__name__}: {str(exc)[:300]}"}


def _hf_inputs(pair: Any, inp: BenchInput, inputs: Any) -> dict | Exception:
    try:
        return processor_inputs(pair, inp.clip, inputs)
    except Exception as exc:  # noqa: BLE001 - every peer run reports it
        return exc


def bench_input(pair: Any, inp: BenchInput, settings: BenchSettings,
                progress: Callable[[str], None] | None = None) -> list[dict]:
    """Warm up, then run ``settings.repeats`` interleaved rounds of every method on one input.

    Peak memory is measured in the first warm-up round (untimed: on a CPU the probe runs the
    torch profiler); with ``warmup=0`` the memory fields stay None.

    Returns:
        One summary dict per method with the keys of :data:`METHOD_FIELDS`.
    """
    inputs = pair.adapter.prepare(pair.processor, pair.target, inp.clip, inp.prompt)
    enc = _hf_inputs(pair, inp, inputs) if set(settings.methods) & set(PEERS) else None
    memory: dict[str, dict] = {}
    base = rss_mb() or True   # one CPU base for every method's peak (the resident set drifts up)
    for w in range(settings.warmup):
        for m in settings.methods:
            rec = run_method(pair, m, inp, inputs, settings, enc, memory=base if w == 0 else False)
            if w == 0:
                memory[m] = rec
    runs: dict[str, list[dict]] = {m: [] for m in settings.methods}
    for r in range(settings.repeats):
        for m in settings.methods:
            rec = run_method(pair, m, inp, inputs, settings, enc)
            runs[m].append(rec)
            if progress:
                tps = rec["decode_tokens_per_s"]
                progress(f"[{inp.name}] round {r + 1}/{settings.repeats} {m}: "
                         + (f"{tps:.1f} tokens/s" if tps else rec["status"]))
    return [summarize(inp.name, m, runs[m], runs["vanilla"], pair, memory.get(m)) for m in settings.methods]


def _median(vals: Sequence[Any]) -> float | None:
    xs = [float(v) for v in vals if v is not None]
    return statistics.median(xs) if xs else None


def summarize(name: str, method: str, runs: list[dict], vanilla: list[dict], pair: Any,
              memory_run: dict | None = None) -> dict:
    """Per-method summary over rounds: medians, identity vs vanilla, speedup median/min/max.

    Args:
        name: input name.
        method: the method.
        runs: this method's run records, one per round.
        vanilla: vanilla's run records of the same rounds (speedups are per-round ratios).
        pair: the ModelPair (labels).
        memory_run: the untimed run that measured peak memory (its peak memory fields are
            used); None keeps the rounds' own (None unless they measured it).

    Returns:
        dict with the keys of :data:`METHOD_FIELDS`.
    """
    label, mode = _label(method, pair)
    rec = {k: None for k in METHOD_FIELDS} | {"input": name, "method": method, "label": label,
                                              "draft_mode": mode}
    ok = [r for r in runs if r["status"] == "ok"]
    rec["repeats"] = len(ok)
    failed = [r for r in runs if r["status"] != "ok"]
    if not ok:
        return rec | {"status": "error", "error": failed[0]["error"], "note": failed[0]["note"]}
    skip = {"status", "error", "note", "identical", "first_divergence"}
    for k in RUN_FIELDS:
        if k not in skip:
            rec[k] = _median([r[k] for r in ok])
            if k in INT_FIELDS and rec[k] is not None:
                rec[k] = int(round(rec[k]))
    if memory_run is not None and memory_run["status"] == "ok":
        rec.update(peak_memory_mb=memory_run["peak_memory_mb"], peak_memory_delta_mb=memory_run["peak_memory_delta_mb"])
    rec.update(status="ok", note=ok[0]["note"], text=ok[0].get("text"),
               error=f"{len(failed)} of {len(runs)} rounds failed: {failed[0]['error']}" if failed else None)
    pairs = [(r, v) for r, v in zip(runs, vanilla) if r["status"] == "ok" and v["status"] == "ok"]
    divs = [first_divergence(v["token_ids"], r["token_ids"]) for r, v in pairs]
    rec["identical"] = bool(divs) and all(d is None for d in divs)
    rec["first_divergence"] = next((d for d in divs if d is not None), None)
    ratios = [r["decode_tokens_per_s"] / v["decode_tokens_per_s"] for r, v in pairs
              if r["decode_tokens_per_s"] and v["decode_tokens_per_s"]]
    if ratios:
        rec.update(speedup=statistics.median(ratios), speedup_min=min(ratios), speedup_max=max(ratios),
                   speedups=ratios)
    v_step = _median([v["verify_ms_per_step"] for v in vanilla if v["status"] == "ok"])
    if v_step and rec["verify_ms_per_step"] is not None:
        rec["verify_vs_decode_step"] = rec["verify_ms_per_step"] / v_step
    return rec


def _cpuinfo() -> tuple[str | None, float | None]:
    """(CPU model name, current MHz of the first core) from /proc/cpuinfo; (platform.processor(), None)
    where there is none."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or None, None
    fields = dict(line.split(":", 1) for line in text.splitlines()[:40] if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    mhz = fields.get("cpu MHz")
    return fields.get("model name") or platform.processor() or None, float(mhz) if mhz else None


def machine_info(device: torch.device | str = "cpu", seconds: float = 0.2) -> dict:
    """What the machine is and how fast it is right now, so reports from different machines compare.

    Session machines of one kind differ (the same bench clip ran 3.5x slower on a 2.0 GHz vCPU pair
    than on a 2.6 GHz one, with the same speedup ratios), so every report carries two quick
    calibration figures measured on the CPU just before the run: fp32 matmul throughput (a 512 x 512
    ``torch.mm``, best of repeated calls, 2 n^3 FLOP each) and memory copy bandwidth (a 64 MiB
    ``Tensor.copy_``, bytes read + written). About ``seconds`` each.

    Returns:
        dict: ``cpu_model`` (str or None), ``cpu_mhz`` (float or None), ``torch_threads`` (int),
        ``matmul_gflops`` (GFLOP/s), ``copy_gb_per_s`` (GB/s, 1e9 bytes); ``gpu`` (name or None).
    """
    model, mhz = _cpuinfo()
    dev = torch.device(device)

    def best(fn: Callable[[], Any]) -> float:
        fn()
        t_end, fastest = time.perf_counter() + seconds, float("inf")
        while time.perf_counter() < t_end:
            t0 = time.perf_counter()
            fn()
            fastest = min(fastest, time.perf_counter() - t0)
        return fastest

    n = 512
    a, b = torch.randn(n, n), torch.randn(n, n)
    src, dst = torch.empty(16 * 2**20), torch.empty(16 * 2**20)
    return {
        "cpu_model": model, "cpu_mhz": mhz, "torch_threads": torch.get_num_threads(),
        "matmul_gflops": round(2 * n**3 / best(lambda: torch.mm(a, b)) / 1e9, 1),
        "copy_gb_per_s": round(2 * src.numel() * 4 / best(lambda: dst.copy_(src)) / 1e9, 1),
        "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
    }


def _machine_line(m: dict) -> str:
    mi = m.get("machine")
    if not mi:
        return ""
    mhz = f" @ {mi['cpu_mhz']:.0f} MHz" if mi.get("cpu_mhz") else ""
    gpu = f", GPU {mi['gpu']}" if mi.get("gpu") else ""
    return (f"Machine: {mi.get('cpu_model') or 'unknown CPU'}{mhz}, {m.get('cpu_count')} CPUs, "
            f"{mi['torch_threads']} torch threads{gpu}; right before the run: fp32 matmul "
            f"{mi['matmul_gflops']} GFLOP/s, memory copy {mi['copy_gb_per_s']} GB/s")


def _meta(pair: Any, settings: BenchSettings) -> dict:
    import transformers

    def params(m: Any) -> int:
        return int(sum(p.numel() for p in m.parameters()))

    dev = pair.device
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": platform.node(), "platform": platform.platform(),
        "cpu_count": os.cpu_count(), "torch": torch.__version__, "transformers": transformers.__version__,
        "device": str(dev), "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
        "dtype": str(pair.target.get_input_embeddings().weight.dtype).replace("torch.", ""),
        "pair": pair.name, "self_sd": pair.self_sd, "target_params": params(pair.target),
        "draft_params": params(pair.draft), "methods": list(settings.methods), "repeats": settings.repeats,
        "warmup": settings.warmup, "max_new_tokens": settings.config.max_new_tokens,
        "fixed_length": not settings.config.stop_at_eos, "decode_config": asdict(settings.config),
        "hf_timing": HF_TIMING, "hf_attention": HF_ATTENTION,
        "speedup": "median over rounds of method decode tokens/s / vanilla decode tokens/s in the same round",
        "peak_memory": "measured in the first (untimed) warm-up round; CUDA: max_memory_allocated after a reset; "
                       "CPU: peak tensor memory of torch's CPU allocator from the profiler's allocation events "
                       "(peak = resident set before the input's first run + delta); delta = peak - value at the start "
                       "of the run",
    }


def run_bench(pair: Any, inputs: Sequence[BenchInput], settings: BenchSettings | None = None,
              progress: Callable[[str], None] | None = None) -> dict:
    """Benchmark every method of ``settings`` on every input.

    Args:
        pair: the ModelPair (Std-SD or Self-SD); ``:self`` methods reuse its target.
        inputs: clips and prompts (inputs with ``sweep=True`` form the length sweep).
        settings: methods, decoding settings, rounds (default: :class:`BenchSettings`).
        progress: called with one line per measured run (the CLI prints it to stderr).

    Returns:
        The report: ``meta`` (settings, versions, conventions), ``inputs`` (name,
        num_video_tokens, num_frames, prompt, sweep), ``results`` (one dict per input and
        method with the keys of :data:`METHOD_FIELDS`; times in s or ms as named,
        throughput in tokens/s, memory in MiB), ``sweep`` (per method: video tokens,
        speedup, τ) and ``verdict`` (see :func:`verdict`).

    Raises:
        BenchError: no inputs or bad settings.
    """
    settings = settings or BenchSettings()
    settings.validate()
    if not inputs:
        raise BenchError("no inputs: give --video, --synthetic-tokens, --sweep or --dataset.")
    machine = machine_info(pair.device)   # calibrated before the runs, on an otherwise idle process
    results, meta_inputs = [], []
    for inp in inputs:
        rows = bench_input(pair, inp, settings, progress)
        results.extend(rows)
        van = rows[0]
        meta_inputs.append({"name": inp.name, "num_video_tokens": van["num_video_tokens"],
                            "target_kv_tokens": van["target_kv_tokens"], "num_frames": int(len(inp.clip.frames)),
                            "prompt": inp.prompt, "reference": inp.reference, "sweep": inp.sweep})
    report = {"meta": {**_meta(pair, settings), "machine": machine}, "inputs": meta_inputs, "results": results}
    report["step_costs"] = measure_step_costs(pair, meta_inputs) if settings.step_costs else None
    report["sweep"] = sweep_series(report)
    report["verdict"] = verdict(report)
    return report


VERIFY_GOAL_TOKENS = 16
STEP_COST_NOISE_RATIO = 0.8
"""A verify(n) / decode ratio below this can only be timing noise (n >= 1 tokens over the same cache)."""
"""The verify goal: a verify forward of up to 16 tree tokens costs <= 1.5x a decode step."""


def measure_step_costs(pair: Any, meta_inputs: Sequence[dict], rounds: int = 5) -> dict:
    """Isolated decode vs verify(n) step costs on the target at the largest input's prompt length.

    Sizes n = 1..``VERIFY_GOAL_TOKENS`` + 1 tokens (root + a chain of n - 1 nodes; n = 17 is the
    default dynamic tree's root + 16 nodes). See :mod:`specvlm.stepcost`.

    Returns:
        {kv_tokens, decode_ms, verify_ms: {n: ms}, ratio: {n: verify / decode}, rounds}
        (dict keys are strings in the JSON).
    """
    L = max(int(i["target_kv_tokens"] or 0) for i in meta_inputs)
    from specvlm.stepcost import verify_cost_curve

    c = verify_cost_curve(pair.target, max(L, 1), tuple(range(1, VERIFY_GOAL_TOKENS + 2)), rounds=rounds)
    return {"kv_tokens": c.kv_tokens, "decode_ms": c.decode_ms, "verify_ms": dict(c.verify_ms),
            "ratio": dict(c.ratio), "rounds": c.rounds}


def _by_size(curve: dict) -> dict[int, float]:
    """A step-cost curve keyed by verify size: int keys (the JSON stores them as strings)."""
    return {int(k): v for k, v in curve.items()}


def sweep_series(report: dict) -> dict[str, list[dict]]:
    """Per method: [{video_tokens, speedup, speedup_min, speedup_max, speedups, tau}] over sweep inputs, by length
    (``speedups``: the per-round ratios)."""
    names = {i["name"]: i["num_video_tokens"] for i in report["inputs"] if i["sweep"]}
    out: dict[str, list[dict]] = {}
    for r in report["results"]:
        if r["input"] in names and r["status"] == "ok":
            out.setdefault(r["method"], []).append({
                "video_tokens": names[r["input"]], "speedup": r["speedup"], "speedup_min": r["speedup_min"],
                "speedup_max": r["speedup_max"], "speedups": r.get("speedups"), "tau": r["tau"],
                "decode_tokens_per_s": r["decode_tokens_per_s"]})
    for series in out.values():
        series.sort(key=lambda p: p["video_tokens"] or 0)
    return out


# --------------------------------------------------------------------------- verdict
GOAL_VIDEO_TOKENS = 16384
"""The issue's goals are stated at 16k video tokens."""


def _row(report: dict, name: str, method: str) -> dict | None:
    for r in report["results"]:
        if r["input"] == name and r["method"] == method and r["status"] == "ok":
            return r
    return None


def _check(goal: str, ok: bool | None, detail: str) -> dict:
    return {"goal": goal, "status": "SKIP" if ok is None else ("PASS" if ok else "FAIL"), "detail": detail}


def _fmt(x: float | None, unit: str = "x", nd: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{nd}f}{unit}"


def verdict(report: dict) -> list[dict]:
    """Check the issue's goals on the input with the most video tokens (and the sweep).

    Goals: lossless (every speculative run identical to vanilla); SpecVLM Std-SD >= 2.0x
    over vanilla, >= 1.3x over SD-Tree (``none``, same draft), faster than HF assisted;
    SpecVLM Self-SD >= 1.3x; verify step <= 1.5x a decode step; speedup grows with video
    length (sweep); our vanilla >= 0.95x HF ``generate()`` tokens/s; Self-SD peak memory
    delta <= 1.1 x (vanilla's delta + draft KV). A goal whose methods were not run is SKIP.

    Returns:
        list of {goal, status: PASS | FAIL | SKIP, detail (measured numbers)}.
    """
    if not report["inputs"]:
        return []
    main = max(report["inputs"], key=lambda i: i["num_video_tokens"] or 0)
    name, v = main["name"], main["num_video_tokens"]
    at = f" at {v} video tokens" + ("" if (v or 0) >= GOAL_VIDEO_TOKENS else f" (goal stated at {GOAL_VIDEO_TOKENS})")
    self_sd = report["meta"]["self_sd"]
    std = None if self_sd else _row(report, name, "specvlm")
    selfrow = _row(report, name, "specvlm:self") or (_row(report, name, "specvlm") if self_sd else None)
    out = [_lossless(report)]
    out.append(_check("SpecVLM Std-SD >= 2.0x decode speedup over vanilla" + at,
                      None if std is None or std["speedup"] is None else std["speedup"] >= 2.0,
                      f"speedup {_fmt(std and std['speedup'])}, tau {_fmt(std and std['tau'], '')}"))
    tree = _row(report, name, "none") if std else None
    rel = std["decode_tokens_per_s"] / tree["decode_tokens_per_s"] if std and tree and tree["decode_tokens_per_s"] \
        and std["decode_tokens_per_s"] else None
    out.append(_check("SpecVLM >= 1.3x over SD-Tree with the same draft" + at, None if rel is None else rel >= 1.3,
                      f"SpecVLM/SD-Tree tokens/s {_fmt(rel)}"))
    hfa = _row(report, name, "hf-assisted")
    rel = std["decode_tokens_per_s"] / hfa["decode_tokens_per_s"] if std and hfa and hfa["decode_tokens_per_s"] \
        and std["decode_tokens_per_s"] else None
    out.append(_check("SpecVLM faster than HF assisted generation with the same draft" + at,
                      None if rel is None else rel > 1.0, f"SpecVLM/HF-assisted tokens/s {_fmt(rel)}"))
    out.append(_check("SpecVLM Self-SD >= 1.3x over vanilla" + at,
                      None if selfrow is None or selfrow["speedup"] is None else selfrow["speedup"] >= 1.3,
                      f"speedup {_fmt(selfrow and selfrow['speedup'])}, tau {_fmt(selfrow and selfrow['tau'], '')}"))
    out += [_verify_goal(report, name, at), _growth_goal(report), _hf_goal(report, name, at),
            _memory_goal(report, name, selfrow, at)]
    return out


def _sampling_temperature(report: dict) -> float:
    """The run's sampling temperature (0 = greedy) from ``meta.decode_config``."""
    samp = (report["meta"].get("decode_config") or {}).get("sampling") or {}
    return float(samp.get("temperature") or 0.0)


def _lossless(report: dict) -> dict:
    spec = [r for r in report["results"] if r["method"] != "vanilla" and r["status"] == "ok"
            and r["method"] not in PEERS]
    temp = _sampling_temperature(report)
    if temp > 0 and spec:
        return _check("every speculative run token-identical to vanilla", None,
                      f"sampling (temperature {temp:g}): speculative sampling is lossless in distribution, not "
                      "token by token, so identity is not checked; use --temperature 0 (greedy) for the check")
    bad = [f"{r['method']}@{r['input']}: first divergence at token {r['first_divergence']}"
           for r in spec if not r["identical"]]
    return _check("every speculative run token-identical to vanilla", None if not spec else not bad,
                  "; ".join(bad) if bad else f"{len(spec)} method x input combinations identical")


def _verify_goal(report: dict, name: str, at: str) -> dict:
    """Verify <= 1.5x a decode step: on the isolated cost curve when measured (the worst size
    n <= 16 tokens), else on the run's mean verify step; the other figure goes in the detail."""
    cfg = report["meta"]["decode_config"]["tree"]
    row = _row(report, name, "specvlm") or _row(report, name, "none")
    run_r = row["verify_vs_decode_step"] if row else None
    nodes = cfg["depth"] if cfg.get("shape") == "chain" else cfg["total_tokens"]
    stop = f", early stop {cfg['min_prob']}" if cfg.get("min_prob") else ""
    in_run = (f"in the run ({row['method'] if row else 'n/a'}, tree <= {nodes} nodes{stop}): mean verify step "
              f"{_fmt(row and row['verify_ms_per_step'], ' ms', 1)} = {_fmt(run_r)} the vanilla step")
    sc = report.get("step_costs")
    if not sc:
        return _check(f"verify step (tree <= {nodes} nodes{stop}) <= 1.5x a decode step" + at,
                      None if run_r is None else run_r <= 1.5, in_run)
    ratio, ms = _by_size(sc["ratio"]), _by_size(sc["verify_ms"])
    goal = [n for n in ratio if n <= VERIFY_GOAL_TOKENS]
    worst = max(goal, key=lambda n: ratio[n])
    extra = [f"{n} tokens {ratio[n]:.2f}x" for n in sorted(ratio) if n > VERIFY_GOAL_TOKENS]
    detail = (f"isolated, {sc['kv_tokens']} cached tokens: decode {sc['decode_ms']:.1f} ms; verify of "
              f"{worst} tokens {ms[worst]:.1f} ms, {ratio[worst]:.2f}x a decode step (median of per-round ratios; "
              f"worst of 1..{VERIFY_GOAL_TOKENS}"
              + (f"; {', '.join(extra)}" if extra else "") + f"); {in_run}")
    return _check(f"a verify forward of up to {VERIFY_GOAL_TOKENS} tree tokens <= 1.5x a decode step" + at,
                  ratio[worst] <= 1.5, detail)


GROWTH_MIN_ROUNDS = 3
"""Rounds per sweep length needed to judge growth by the trend's confidence interval."""


GROWTH_ALPHA = 0.025
"""One-sided significance level of the growth trend (the same as a 95% two-sided interval's lower end)."""


def speedup_trend(points: Sequence[tuple[int, Sequence[float]]], permutations: int = 4000,
                  seed: int = 0) -> tuple[float, float]:
    """Least-squares slope of per-round speedup against log2(video tokens), and its one-sided p-value.

    The p-value is a permutation test: under "no growth" the per-round speedups are exchangeable
    across lengths, so the share of random reassignments (seeded) whose slope is at least the
    observed one estimates P(slope this large | no growth). Calibrated for any noise distribution
    (simulated with no true trend, 5 lengths x 3 / 5 rounds, 400 trials: 3.3% / 2.0% below 0.025), unlike a
    percentile bootstrap with 3-5 rounds per length, which passed ~9% / ~4.5%.

    Args:
        points: per sweep length (video tokens, that length's per-round speedups).
        permutations: random reassignments.
        seed: permutation seed (the verdict is repeatable).

    Returns:
        (slope in speedup (x) per doubling of the video tokens, one-sided p-value).

    Raises:
        ValueError: fewer than two distinct lengths, or a length without rounds.

    Source: ordinary least squares; permutation test of a regression slope (Good, Permutation Tests,
    2005, ch. 8), p = (1 + #{permuted slope >= observed}) / (1 + permutations).
    """
    if any(len(r) == 0 for _, r in points) or len({v for v, _ in points}) < 2:
        raise ValueError("speedup_trend needs >= 2 distinct sweep lengths, each with >= 1 round.")
    x = np.concatenate([np.full(len(r), np.log2(v)) for v, r in points])
    y = np.concatenate([np.asarray(r, dtype=float) for _, r in points])
    xc = x - x.mean()
    est = float(xc @ (y - y.mean()) / (xc @ xc))
    gen = np.random.default_rng(seed)
    perm = np.stack([gen.permutation(y) for _ in range(permutations)])
    slopes = (perm - perm.mean(1, keepdims=True)) @ xc / (xc @ xc)
    p = (1 + int((slopes >= est - 1e-12).sum())) / (1 + permutations)
    return est, p


def _growth_goal(report: dict) -> dict:
    """Growth = a positive trend that the rounds' noise cannot explain (permutation p < GROWTH_ALPHA) and the
    longest input faster than the shortest; with < GROWTH_MIN_ROUNDS rounds per length: no neighbour drops > 5%."""
    goal = "speedup grows with video length (sweep)"
    series = report["sweep"].get("specvlm") or report["sweep"].get("specvlm:self") or []
    pts = [p for p in series if p["speedup"] is not None]
    if len(pts) < 2:
        return _check(goal, None, "needs --sweep with >= 2 lengths")
    medians = ", ".join(f"{p['video_tokens']}: {p['speedup']:.2f}x" for p in pts)
    ends = pts[-1]["speedup"] > pts[0]["speedup"]
    rounds = [p.get("speedups") or [] for p in pts]
    if min(len(r) for r in rounds) < GROWTH_MIN_ROUNDS:
        ok = ends and all(b["speedup"] >= 0.95 * a["speedup"] for a, b in zip(pts, pts[1:]))
        return _check(goal, ok, f"{medians} (no drop > 5% between neighbours; with >= {GROWTH_MIN_ROUNDS} "
                                "rounds the trend is judged instead)")
    if len({p["video_tokens"] for p in pts}) < 2:
        return _check(goal, None, f"{medians}: needs >= 2 distinct lengths")
    est, pval = speedup_trend([(p["video_tokens"], r) for p, r in zip(pts, rounds)])
    drops = [f"{a['video_tokens']}->{b['video_tokens']}" for a, b in zip(pts, pts[1:])
             if b["speedup"] < 0.95 * a["speedup"]]
    detail = (f"{medians}; trend {est:+.2f}x per doubling of video tokens (least squares over "
              f"{sum(len(r) for r in rounds)} per-round speedups, one-sided permutation p = {pval:.3f}; PASS needs "
              f"p < {GROWTH_ALPHA} and the longest input faster than the shortest)"
              + (f"; neighbour drops > 5% in the medians: {', '.join(drops)}" if drops else ""))
    tree = [p for p in report["sweep"].get("none") or [] if p.get("speedups")]
    if len({p["video_tokens"] for p in tree}) >= 2 and series is report["sweep"].get("specvlm"):
        t_est, t_p = speedup_trend([(p["video_tokens"], p["speedups"]) for p in tree])  # the draft sees every video token
        detail += f"; SD-Tree (no pruning) for contrast: {t_est:+.2f}x per doubling (p = {t_p:.3f})"
    return _check(goal, ends and pval < GROWTH_ALPHA, detail)


def _hf_goal(report: dict, name: str, at: str) -> dict:
    van, hf = _row(report, name, "vanilla"), _row(report, name, "hf")
    r = van["decode_tokens_per_s"] / hf["decode_tokens_per_s"] if van and hf and hf["decode_tokens_per_s"] \
        and van["decode_tokens_per_s"] else None
    return _check("our vanilla >= 0.95x HF generate() tokens/s" + at, None if r is None else r >= 0.95,
                  f"vanilla/HF {_fmt(r)} ({_fmt(van and van['decode_tokens_per_s'], ' tok/s', 1)} vs "
                  f"{_fmt(hf and hf['decode_tokens_per_s'], ' tok/s', 1)})")


def _memory_goal(report: dict, name: str, selfrow: dict | None, at: str) -> dict:
    van = _row(report, name, "vanilla")
    if not van or not selfrow:
        return _check("Self-SD peak memory <= vanilla peak + draft KV + 10%" + at, None, "needs specvlm:self")
    if van["peak_memory_delta_mb"] is None or selfrow["peak_memory_delta_mb"] is None:
        return _check("Self-SD peak memory <= vanilla peak + draft KV + 10%" + at, None,
                      "not measured: peak memory is measured in the first warm-up round (use --warmup 1 or more)")
    if not van["peak_memory_delta_mb"]:  # nothing allocated above the start: too small to judge
        return _check("Self-SD peak memory <= vanilla peak + draft KV + 10%" + at, None,
                      "not measurable: vanilla's peak memory did not rise above its start")
    bound = 1.1 * (van["peak_memory_delta_mb"] + (selfrow["draft_kv_mb"] or 0.0))
    return _check("Self-SD peak memory <= vanilla peak + draft KV + 10%" + at,
                  selfrow["peak_memory_delta_mb"] <= bound,
                  f"Self-SD delta {selfrow['peak_memory_delta_mb']:.1f} MiB vs bound {bound:.1f} MiB "
                  f"(vanilla delta {van['peak_memory_delta_mb']:.1f} + draft KV {selfrow['draft_kv_mb'] or 0:.1f})")


# --------------------------------------------------------------------------- output
def _cell(x: Any, nd: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "NO"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def _identity_cell(r: dict, sampling: bool = False) -> str:
    if r["method"] == "vanilla":
        return "(reference)"
    if sampling and r["method"] not in PEERS:
        return "n/a (sampling)"
    if r["identical"] is None:
        return "-"
    return "yes" if r["identical"] else f"NO (token {r['first_divergence']})"


def markdown_table(report: dict, name: str) -> str:
    """One input's results as a markdown table (times: s / ms, throughput: tokens/s, memory: MiB)."""
    head = ("| method | τ | tokens/target fwd | decode tokens/s | speedup (min-max) | e2e s | draft ms/step | "
            "verify ms/step | KV target / draft | peak MiB (Δ) | identical to vanilla |")
    lines = [head, "|" + "---|" * 11]
    sampling = _sampling_temperature(report) > 0
    for r in report["results"]:
        if r["input"] != name:
            continue
        if r["status"] != "ok":
            lines.append(f"| {r['label']} | failed: {r['error']} |" + " |" * 9)
            continue
        sp = f"{r['speedup']:.2f}x ({r['speedup_min']:.2f}-{r['speedup_max']:.2f})" if r["speedup"] else "-"
        kv = f"{_cell(r['target_kv_tokens'], 0)} / {_cell(r['draft_kv_tokens'], 0)}"
        mem = f"{_cell(r['peak_memory_mb'], 0)} ({_cell(r['peak_memory_delta_mb'], 0)})"
        lines.append(f"| {r['label']} | {_cell(r['tau'])} | {_cell(r['tokens_per_target_forward'])} | "
                     f"{_cell(r['decode_tokens_per_s'], 1)} | {sp} | {_cell(r['e2e_s'])} | "
                     f"{_cell(r['draft_ms_per_step'], 1)} | {_cell(r['verify_ms_per_step'], 1)} | {kv} | {mem} | "
                     f"{_identity_cell(r, sampling)} |")
    return "\n".join(lines)


def format_report(report: dict) -> str:
    """The printed report: one markdown table per input, peer notes, then the verdict lines."""
    m = report["meta"]
    temp = _sampling_temperature(report)
    decoding = f", sampling at temperature {temp:g}" if temp > 0 else ", greedy"
    out = [f"## SpecVLM bench: {m['pair']} on {m['device']} ({m['dtype']}), {m['max_new_tokens']} new tokens"
           f"{' (fixed length)' if m['fixed_length'] else ''}{decoding}, {m['repeats']} "
           f"round{'s' if m['repeats'] != 1 else ''} + {m['warmup']} warm-up", ""]
    machine = _machine_line(m)
    if machine:
        out += [machine, ""]
    for inp in report["inputs"]:
        out += [f"### {inp['name']}: {inp['num_video_tokens']} video tokens, {inp['num_frames']} frames, "
                f"{inp['target_kv_tokens']} prompt tokens", "", markdown_table(report, inp["name"]), ""]
    notes = {(r["label"], r["note"]) for r in report["results"] if r["note"]}
    out += [f"- {label}: {note}" for label, note in sorted(notes)]
    if set(m["methods"]) & set(PEERS):
        out.append(f"- HF peers: stock generate() with {m['hf_attention']} attention, timed by {m['hf_timing']}")
    out += [f"- speedup: {m['speedup']}", f"- peak memory: {m['peak_memory']}", ""]
    spread = [r["speedup_max"] / r["speedup_min"] for r in report["results"] if r["speedup_min"]]
    if spread and max(spread) > 1.5:
        out += [f"WARNING: per-round speedups of one method differ up to {max(spread):.1f}x: the machine is noisy "
                "(other load?); use more --repeats or a quiet machine before trusting the verdict.", ""]
    sc = report.get("step_costs")
    if sc:
        ratio = _by_size(sc["ratio"])
        sizes = sorted(ratio)
        out += [f"### Step costs (isolated, target, {sc['kv_tokens']} cached tokens, median of {sc['rounds']} "
                f"interleaved rounds): decode step {sc['decode_ms']:.1f} ms", "",
                "| verify tokens | " + " | ".join(str(n) for n in sizes) + " |", "|---" * (len(sizes) + 1) + "|",
                "| x decode step | " + " | ".join(f"{ratio[n]:.2f}" for n in sizes) + " |", "",
                "Ratios are medians of per-round ratios (verify / decode in the same round), so they need not "
                "equal the ratio of the median times in the JSON; the dynamic tree's default (16 nodes + root) "
                "is 17 tokens.", ""]
        if ratio and min(ratio.values()) < STEP_COST_NOISE_RATIO:
            out += [f"WARNING: a verify forward read {min(ratio.values()):.2f}x a decode step; more tokens cannot "
                    "cost less than one, so the machine was busy while the step costs were timed: rerun on a "
                    "quiet machine before trusting the verify goal.", ""]
    out += ["### Verdict", ""] + [f"{v['status']:4}  {v['goal']}: {v['detail']}" for v in report["verdict"]]
    return "\n".join(out)


def write_json(report: dict, path: str | os.PathLike) -> Path:
    """Write the report as JSON (token ids dropped, floats as-is); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(report, indent=1, default=str))
    return p


def _figures(report: dict) -> list:
    import plotly.graph_objects as go

    main = max(report["inputs"], key=lambda i: i["num_video_tokens"] or 0)["name"]
    rows = [r for r in report["results"] if r["input"] == main and r["status"] == "ok"]
    labels = [r["label"] for r in rows]
    sp = [r["speedup"] or 0 for r in rows]
    err = dict(type="data", symmetric=False, array=[(r["speedup_max"] or 0) - (r["speedup"] or 0) for r in rows],
               arrayminus=[(r["speedup"] or 0) - (r["speedup_min"] or 0) for r in rows])
    f1 = go.Figure(go.Bar(x=labels, y=sp, error_y=err, text=[f"{s:.2f}x" for s in sp], textposition="outside"))
    f1.update_layout(title=f"Decode speedup over our vanilla ({main}; median, min-max over rounds)",
                     yaxis_title="speedup (x)")
    f2 = go.Figure([go.Bar(name="draft ms/step", x=labels, y=[r["draft_ms_per_step"] or 0 for r in rows]),
                    go.Bar(name="verify ms/step", x=labels, y=[r["verify_ms_per_step"] or 0 for r in rows])])
    f2.update_layout(barmode="stack", title="Time per target step (ms): drafting vs verification",
                     yaxis_title="ms per step")
    figs = [f1, f2]
    if report["sweep"]:
        f3, f4 = go.Figure(), go.Figure()
        for method, pts in report["sweep"].items():
            xs = [p["video_tokens"] for p in pts]
            f3.add_trace(go.Scatter(x=xs, y=[p["speedup"] for p in pts], mode="lines+markers", name=method))
            if any(p["tau"] is not None for p in pts):
                f4.add_trace(go.Scatter(x=xs, y=[p["tau"] for p in pts], mode="lines+markers", name=method))
        f3.update_layout(title="Speedup vs video tokens", xaxis_type="log", xaxis_title="video tokens",
                         yaxis_title="decode speedup (x)")
        f4.update_layout(title="τ (mean accepted length) vs video tokens", xaxis_type="log",
                         xaxis_title="video tokens", yaxis_title="τ")
        figs += [f3, f4]
    sc = report.get("step_costs")
    if sc:
        ratio = _by_size(sc["ratio"])
        sizes = sorted(ratio)
        f5 = go.Figure(go.Scatter(x=sizes, y=[ratio[n] for n in sizes], mode="lines+markers", name="verify / decode"))
        f5.add_hline(y=1.5, line_dash="dash", annotation_text="goal 1.5x (up to 16 tokens)")
        f5.update_layout(title=f"Verify forward cost vs tokens verified ({sc['kv_tokens']} cached tokens; decode step "
                               f"{sc['decode_ms']:.1f} ms)", xaxis_title="tokens in the verify forward (root + nodes)",
                         yaxis_title="x a decode step")
        figs.append(f5)
    return figs


def write_svg(report: dict, path: str | os.PathLike) -> Path:
    """Write the length sweep as a static SVG (speedup and τ vs video tokens) for READMEs.

    Raises:
        specvlm.svgchart.ChartError: the report has no sweep points.
    """
    from specvlm.svgchart import sweep_svg

    labels = {}
    for r in report["results"]:
        labels.setdefault(r["method"], r["label"])
    meta = report.get("meta", {})
    pair = str(meta.get("pair", "")).replace(str(Path.cwd()) + os.sep, "")  # repo-relative model paths
    title = (f"{pair}; {meta.get('max_new_tokens', '?')} new tokens"
             f"{' (fixed length)' if meta.get('fixed_length') else ''}, {meta.get('device', '')}")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(sweep_svg(report["sweep"], labels, title))
    return p


def write_html(report: dict, path: str | os.PathLike) -> Path:
    """A self-contained plotly HTML report: speedup bars, draft/verify time, sweep plots, tables, verdict.

    plotly.js is inlined once, so the file opens offline (~4.5 MB).
    """
    import html

    import plotly.io as pio

    parts = ["<h1>SpecVLM bench</h1>", f"<pre>{html.escape(format_report(report))}</pre>"]
    for i, fig in enumerate(_figures(report)):
        parts.append(pio.to_html(fig, full_html=False, include_plotlyjs="inline" if i == 0 else False))
    parts.append("<details><summary>settings and environment</summary><pre>"
                 f"{html.escape(json.dumps(report['meta'], indent=1, default=str))}</pre></details>")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("<!doctype html><html><head><meta charset='utf-8'><title>SpecVLM bench</title></head><body>"
                 + "\n".join(parts) + "</body></html>", encoding="utf-8")
    return p


# --------------------------------------------------------------------------- command line
TINY_PRESETS = ("tiny", "tiny-llava")
"""In-process random-weight tiny pairs (no files): smoke runs and tests."""

DESCRIPTION = (
    "Run vanilla, speculative methods (SpecVLM and baselines, Std-SD or Self-SD) and Hugging Face peers on the "
    "same inputs: warm-up, then interleaved rounds. Prints a markdown table per input (tau, tokens per target "
    "forward, decode tokens/s, speedup over our vanilla as median (min-max) of per-round ratios, end-to-end s, "
    "draft/verify ms per step, KV lengths, peak memory, identity to vanilla) and a PASS/FAIL/SKIP verdict on the "
    "speed goals (at 16k video tokens: Std-SD >= 2x vanilla and >= 1.3x SD-Tree, faster than HF assisted, "
    "Self-SD >= 1.3x, verify <= 1.5x a decode step; speedup grows with length; vanilla >= 0.95x HF generate; "
    "Self-SD memory; every output identical).")

EXAMPLES = """examples:
  python -m specvlm bench --synthetic-tokens 4096 --repeats 3 --out-json bench.json --out-html bench.html
  python -m specvlm bench --sweep 1024,2048,4096,8192,16384 --fixed-length --max-new-tokens 128 \\
      --methods vanilla,none,specvlm,specvlm:self,hf,hf-assisted --out-html sweep.html
  python -m specvlm bench --video clip.mp4 --methods vanilla,specvlm,hf --repeats 5
  python -m specvlm bench --preset paper-qwen --dataset vdc --data-root data/VideoDetailCaption --num-samples 20
  python -m specvlm bench --preset tiny --synthetic-tokens 256 --max-new-tokens 16 --repeats 1
"""


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register the ``bench`` sub-command on ``python -m specvlm``'s sub-parsers."""
    from specvlm.__main__ import add_decode_args, add_model_args
    from specvlm.datasets import DATASETS, PAPER_SETTINGS

    b = sub.add_parser("bench", help="benchmark methods and HF peers; markdown table, JSON, HTML",
                       description=DESCRIPTION, epilog=EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                   help="log progress to stderr (also accepted before the sub-command)")
    g = b.add_argument_group("inputs (any mix; default --synthetic-tokens 4096)")
    g.add_argument("--video", action="append", default=[], help="video file (repeatable)")
    g.add_argument("--prompt", default="Describe this video in detail.", help="prompt for videos and generated clips")
    g.add_argument("--synthetic-tokens", help="generated clips sized for ~N video tokens each, e.g. 4096 or 2048,8192")
    g.add_argument("--sweep", help="length sweep over generated clips, e.g. 1024,2048,4096,8192,16384 (plotted)")
    g.add_argument("--synthetic-side", type=int, default=224, help="generated frame side in px (default %(default)s)")
    g.add_argument("--synthetic-fps", type=float, default=2.0,
                   help="frame rate of generated clips (default %(default)s); it sets Qwen2.5-VL's temporal "
                        "M-RoPE positions (tokens_per_second x seconds), so match what the model was trained on")
    g.add_argument("--dataset", choices=sorted(DATASETS), help="a local copy of a paper benchmark")
    g.add_argument("--data-root", help="folder of the local dataset copy")
    g.add_argument("--num-samples", type=int, default=5, help="seeded subset size (default %(default)s)")
    g.add_argument("--data-seed", type=int, default=0, help="subset seed (default %(default)s)")
    r = b.add_argument_group("benchmark")
    r.add_argument("--preset", choices=sorted(PAPER_SETTINGS) + list(TINY_PRESETS),
                   help="paper settings (models, frames, r, λ, 256 tokens) or an in-process tiny pair")
    r.add_argument("--methods", default="all", help="comma list from: " + ", ".join(DEFAULT_METHODS)
                   + f" (or any other pruning method: {', '.join(m for m in PRUNE_METHODS if m not in DEFAULT_METHODS)};"
                   + f" suffix '{SELF}' = Self-SD); default all")
    r.add_argument("--repeats", type=int, default=3, help="measured interleaved rounds (default %(default)s)")
    r.add_argument("--warmup", type=int, default=1, help="unmeasured rounds first (default %(default)s)")
    r.add_argument("--fixed-length", action="store_true", help="ignore EOS: every run generates --max-new-tokens "
                   "(the paper's fairness setting; same as --no-eos)")
    r.add_argument("--prompt-lookup-tokens", type=int, default=10, help="prompt_lookup_num_tokens (default 10)")
    r.add_argument("--no-step-costs", action="store_true",
                   help="skip the isolated decode vs verify(1..17 tokens) timing on the largest input "
                        "(~20 s at 16k video tokens on a CPU); the verify goal then uses the runs' mean verify step")
    r.add_argument("--out-json", help="write the report as JSON")
    r.add_argument("--out-html", help="write a plotly HTML report")
    r.add_argument("--out-svg", help="write the length sweep (speedup and τ vs video tokens) as a static SVG")
    add_model_args(b)
    add_decode_args(b)
    b.set_defaults(func=None, bench=True)  # the CLI (specvlm.__main__) runs it: the library never prints
    return b


def _tiny_pair(name: str, self_sd: bool) -> Any:
    from specvlm.models import pair_from_models
    from specvlm.tiny import tiny_llava_onevision, tiny_qwen2_5_vl

    if name == "tiny-llava":
        t, d = tiny_llava_onevision(seed=0), (None if self_sd else tiny_llava_onevision(seed=1, hidden=32, layers=1))
    else:
        t = tiny_qwen2_5_vl(seed=0)
        d = None if self_sd else tiny_qwen2_5_vl(seed=1, hidden=32, layers=1, pad_vocab_to=64)
    if d is None:
        return pair_from_models(*t, name=f"{name} (Self-SD)")
    return pair_from_models(t[0], t[1], d[0], d[1], name=f"{name} (Std-SD)")


def _apply_preset(args: argparse.Namespace) -> Any:
    """Fill unset model/frames/budget arguments from a paper preset; returns it (or None)."""
    from specvlm.datasets import PAPER_SETTINGS

    s = PAPER_SETTINGS.get(args.preset or "")
    if s is None:
        return None
    if not args.model:
        args.model = s.target
        args.draft = args.draft or (None if args.self_sd else s.draft)
    if args.num_frames is None:
        args.num_frames = s.num_frames
    if args.max_new_tokens is None:
        args.max_new_tokens = s.max_new_tokens
    return s


MIN_SYNTHETIC_SIDE = 56
"""Smallest generated frame side (px): the procedural scenes need room for their shapes."""


def check_output_path(flag: str, path: str | os.PathLike) -> Path:
    """Check before a long run that ``path`` can be written (its folder is made if missing).

    Returns:
        The path.

    Raises:
        BenchError: the path is a folder, or its folder cannot be made or written (names ``flag``).
    """
    p = Path(path)
    if p.is_dir():
        raise BenchError(f"{flag} {path}: is a folder; give a file path, e.g. {Path(path) / 'bench.json'}.")
    existed = p.exists()
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "a"):
            pass
    except OSError as exc:
        raise BenchError(f"{flag} {path}: cannot write there ({exc.strerror or exc}); give a writable file path.") \
            from exc
    if not existed:
        p.unlink()
    return p


def check_cli_args(args: argparse.Namespace) -> None:
    """Everything about the ``bench`` arguments that can fail before the (slow) model load and runs.

    Raises:
        BenchError: bad length lists, frame side, prompt or output paths; ``--out-svg`` without
            ``--sweep``.
    """
    _check_length_lists(args)
    if args.synthetic_side < MIN_SYNTHETIC_SIDE:
        raise BenchError(f"--synthetic-side {args.synthetic_side}: give a frame side of at least "
                         f"{MIN_SYNTHETIC_SIDE} px (default 224).")
    from specvlm.__main__ import check_prompt_flag

    check_prompt_flag(args.prompt)
    if args.out_svg and not args.sweep:
        raise BenchError("--out-svg plots the length sweep: add --sweep (e.g. 1024,2048,4096), or use --out-html "
                         "for the charts of other inputs.")
    for flag, path in (("--out-json", args.out_json), ("--out-html", args.out_html), ("--out-svg", args.out_svg)):
        if path:
            check_output_path(flag, path)


def _check_length_lists(args: argparse.Namespace) -> None:
    """Raise BenchError for an empty, malformed or repeating ``--sweep`` / ``--synthetic-tokens`` list."""
    for flag, text in (("--synthetic-tokens", args.synthetic_tokens), ("--sweep", args.sweep)):
        if text is not None and not text.strip(" ,"):
            raise BenchError(f"{flag} {text!r} names no length: give video token counts, e.g. 1024,2048,4096.")
        if text and len(set(parse_int_list(text))) != len(parse_int_list(text)):
            raise BenchError(f"{flag} {text!r} repeats a length: give each video token count once "
                             "(use --repeats for more rounds).")


def build_inputs(args: argparse.Namespace, pair: Any, vcfg: VideoConfig) -> list[BenchInput]:
    """Bench inputs from the CLI arguments: videos, generated clips, sweep clips, dataset samples.

    Raises:
        BenchError / VideoError / DatasetError: bad lists, unreadable videos, missing dataset files.
    """
    from specvlm.video import load_video

    _check_length_lists(args)
    inputs = [BenchInput(Path(v).name, load_video(v, vcfg), args.prompt) for v in args.video]
    if args.dataset:
        from specvlm.datasets import load_dataset

        if not args.data_root:
            raise BenchError("--dataset needs --data-root (the folder of the local copy).")
        for s in load_dataset(args.dataset, args.data_root, args.num_samples, args.data_seed):
            inputs.append(BenchInput(s.id, load_video(s.video, vcfg), s.prompt, s.answer))
    if not inputs and not args.synthetic_tokens and not args.sweep:
        args.synthetic_tokens = "4096"
    if (args.synthetic_tokens or args.sweep) and not (args.synthetic_fps > 0 and np.isfinite(args.synthetic_fps)):
        raise BenchError(f"--synthetic-fps={args.synthetic_fps}: give a frame rate > 0 (e.g. 8 for the bundled model).")
    for i, n in enumerate(parse_int_list(args.synthetic_tokens) if args.synthetic_tokens else []):
        clip = synthetic_clip(pair, n, side=args.synthetic_side, seed=i, fps=args.synthetic_fps)
        inputs.append(BenchInput(f"synthetic-{n}", clip, args.prompt))
    for n in parse_int_list(args.sweep) if args.sweep else []:
        clip = synthetic_clip(pair, n, side=args.synthetic_side, fps=args.synthetic_fps)
        inputs.append(BenchInput(f"sweep-{n}", clip, args.prompt, sweep=True))
    return inputs


def drop_redundant_self(methods: Sequence[str], self_sd: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Drop ``X:self`` methods that would repeat ``X`` on a pair that is already Self-SD.

    Returns:
        (the methods kept, in order; the ``:self`` methods dropped). Nothing is dropped for a
        Std-SD pair, or where ``X`` itself is not listed.
    """
    if not self_sd:
        return tuple(methods), ()
    dropped = tuple(m for m in methods if m.endswith(SELF) and m[:-len(SELF)] in methods)
    return tuple(m for m in methods if m not in dropped), dropped


def _setting_notes(args: argparse.Namespace, settings: BenchSettings) -> list[str]:
    """Settings that the run will not use, said once before it starts."""
    notes = []
    if (args.num_frames is not None or args.fps is not None) and not (args.video or args.dataset):
        notes.append("--num-frames / --fps sample video files; generated clips (--synthetic-tokens, --sweep) are "
                     "sized by their video token count instead")
    tree = settings.config.tree
    if tree.shape == "static" and tree.min_prob > 0:
        notes.append("--min-prob has no effect on a static tree (its shape is fixed); use --tree chain or dynamic")
    return notes


def report_from_args(args: argparse.Namespace, progress: Callable[[str], None] | None = None) -> dict:
    """Run ``python -m specvlm bench`` as the arguments say and return the report (the CLI prints it).

    Args:
        args: the parsed ``bench`` arguments.
        progress: called with one line per finished run.

    Returns:
        The report dict (see :func:`run_bench`).

    Raises:
        ValueError: bad settings, inputs or models (the CLI shows the message).
    """
    from specvlm.__main__ import decode_config, load_from_args

    setting = _apply_preset(args)
    args.no_eos = args.no_eos or args.fixed_length
    methods = parse_methods(args.methods)       # settings errors before the (slow) model load
    BenchSettings(methods=methods, repeats=args.repeats, warmup=args.warmup).validate()
    check_cli_args(args)
    if args.preset in TINY_PRESETS:
        pair, preset = _tiny_pair(args.preset, args.self_sd), None
    else:
        pair, preset = load_from_args(args)
    methods, dropped = drop_redundant_self(methods, pair.self_sd)
    settings = BenchSettings(methods=methods, config=decode_config(args, "vanilla", preset),
                             repeats=args.repeats, warmup=args.warmup, prompt_lookup_tokens=args.prompt_lookup_tokens,
                             step_costs=not args.no_step_costs)
    settings.validate()
    n = args.num_frames if args.num_frames is not None else (preset.num_frames if preset else 16)
    vcfg = VideoConfig(num_frames=n, fps=args.fps, max_frames=max(256, n),
                       max_pixels=setting.max_pixels if setting else VideoConfig().max_pixels,
                       even_frames=pair.frames_per_token == 2)
    inputs = build_inputs(args, pair, vcfg)
    notes = [f"the pair is already Self-SD, so {m} would repeat {m[:-len(SELF)]}; skipped" for m in dropped]
    notes += _setting_notes(args, settings)
    notes += [f"{inp.name}: {n}" for inp in inputs for n in inp.clip.notes]  # decoder fallback, resizing
    if progress:
        for line in notes:
            progress(f"note: {line}")
    return run_bench(pair, inputs, settings, progress=progress)
