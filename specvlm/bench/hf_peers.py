"""Hugging Face peers: stock ``generate()``, assisted generation with our draft, prompt lookup.

The peers run the target's ``generate()`` with transformers' ``sdpa`` attention (the models are
switched for the call and back) on the same processor output as our methods, and are timed with
a streamer: decode time runs from the streamer's first callback with generated tokens (after
prefill and the vision encoder) to its last callback.

Source: Hugging Face transformers ``generate`` (assisted generation, prompt lookup decoding);
Leviathan et al. 2023.
"""
from __future__ import annotations

import copy
import logging
import time
from typing import Any, Callable

import numpy as np
import torch

from specvlm.bench.records import empty_run, kv_mb, memory_fields, memory_probe
from specvlm.bench.settings import BenchError, BenchSettings
from specvlm.config import DecodeConfig
from specvlm.models.attention import plain_sdpa
from specvlm.bench.memory import MemoryProbe
from specvlm.types import VideoClip

log = logging.getLogger(__name__)

HF_ATTENTION = "sdpa"
"""Attention the Hugging Face peers run with (stock transformers), restored afterwards."""
HF_TIMING = ("streamer: decode time = first to last streamer callback with generated tokens (excludes prefill "
             "and the vision encoder); tokens/s counts the tokens after the first callback")


class _TimingStreamer:
    """A transformers streamer that records when generated tokens arrive (s, perf_counter)."""

    def __init__(self, device: torch.device, on_first: Callable[[], None] | None = None):
        self.device = device
        self.calls: list[tuple[float, int]] = []
        self._prompt_seen = False
        self._on_first = on_first

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate() first echoes the prompt
            self._prompt_seen = True
            return
        if not self.calls and self._on_first is not None:
            self._on_first()   # the first generated token is out: the decode steps start
        self.calls.append((time.perf_counter(), int(value.numel())))

    def end(self) -> None:
        pass


def processor_inputs(pair: Any, clip: VideoClip, inputs: Any) -> dict:
    """The processor output HF ``generate()`` needs, built exactly like the adapter's.

    The adapter's ``prepare`` pads an odd frame count for models with temporal patches
    and passes the real frame timing as ``video_metadata`` (Qwen2.5-VL reads it for its temporal positions); the
    adapter's recorded call (``inputs.processor_kwargs``, e.g. SmolVLM2's clip metadata) is tried first, then both
    call styles, and the one whose ``input_ids`` equal ``inputs.input_ids`` wins.

    Raises:
        BenchError: no call style reproduces the adapter's token ids.
    """
    frames = np.asarray(clip.frames)
    k = max(1, int(pair.frames_per_token))
    if len(frames) % k:
        frames = np.concatenate([frames] + [frames[-1:]] * (k - len(frames) % k), axis=0)
    meta = {"fps": float(clip.sample_fps) or 1.0, "total_num_frames": len(frames),
            "frames_indices": list(range(len(frames)))}
    recorded = getattr(inputs, "processor_kwargs", None)  # the adapter's own call, when it records it
    styles = ((recorded,) if recorded else ()) + (
        {"video_metadata": [meta], "do_sample_frames": False, "cap_pixels_per_frame": False},
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


def _hf_generate(pair: Any, enc: dict, kw: dict, on_first: Callable[[], None] | None = None
                 ) -> tuple[Any, _TimingStreamer, int | None]:
    """Run target.generate with a timing streamer and a forward counter (None for Self-SD assisted);
    ``on_first`` is called when the first generated token reaches the streamer."""
    model = pair.target
    dev = pair.device
    count = [0]
    hook = None
    if kw.get("assistant_model") is not model:
        hook = model.register_forward_hook(lambda *a: count.__setitem__(0, count[0] + 1))
    streamer = _TimingStreamer(dev, on_first)
    assistant = kw.get("assistant_model")
    saved = copy.deepcopy(assistant.generation_config) if assistant is not None else None
    try:
        with plain_sdpa():   # stock transformers attention for the peers, for this call only
            feed = {k: v.to(dev) if torch.is_tensor(v) else v for k, v in enc.items()}
            out = model.generate(**feed, **kw, streamer=streamer)
    finally:
        if hook is not None:
            hook.remove()
        if assistant is not None:
            assistant.generation_config = saved  # HF's heuristic schedule mutates it across calls
    return out, streamer, (count[0] if hook is not None else None)


def _different_tokenizers(method: str, exc: ValueError) -> bool:
    """True when HF refused our draft as assistant over LM-head sizes (padded vocabularies)."""
    return method == "hf-assisted" and "different tokenizers" in str(exc)


def _universal(pair: Any, kw: dict) -> None:
    """Switch ``kw`` to Universal Assisted Decoding with the same tokenizer on both sides."""
    tok = pair.processor.tokenizer
    kw.update(tokenizer=tok, assistant_tokenizer=tok)


def hf_generate_call(pair: Any, method: str, enc: dict, config: DecodeConfig, settings: BenchSettings,
                     on_first: Callable[[], None] | None = None) -> _TimingStreamer:
    """One untimed ``generate()`` of a peer, as :func:`run_hf` makes it (the Universal Assisted Decoding retry
    included); returns its timing streamer (``calls``: one per streamed step). ``on_first`` is called when the
    first generated token is out (:mod:`specvlm.bench.hostreads` resets its counter there).

    Raises:
        Exception: whatever ``generate()`` raises.
    """
    kw, _ = _hf_kwargs(pair, method, config, settings)
    try:
        return _hf_generate(pair, enc, kw, on_first)[1]
    except ValueError as exc:
        if not _different_tokenizers(method, exc):
            raise
        _universal(pair, kw)
        return _hf_generate(pair, enc, kw, on_first)[1]


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
        with memory_probe(pair, memory) as mem:
            t0 = time.perf_counter()
            try:
                out, st, forwards = _hf_generate(pair, enc, kw)
            except ValueError as exc:
                if not _different_tokenizers(method, exc):
                    raise
                _universal(pair, kw)
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
        return empty_run("error") | {"error": why, "note": note}
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
    rec = empty_run()
    rec.update(
        token_ids=ids, num_generated=n, decode_s=decode_s,
        text=pair.processor.tokenizer.decode(ids, skip_special_tokens=True),
        decode_tokens_per_s=after_first / decode_s if decode_s > 0 and after_first > 0 else None,
        e2e_s=e2e, prefill_s=st.calls[0][0] - t0 if st.calls else None,
        target_forwards=(forwards - 1) if forwards else None, tokens_per_target_forward=tptf,
        tau=(tptf - 1) if tptf is not None else None,
        target_kv_tokens=prompt_len, target_kv_mb=kv_mb(pair.target, prompt_len + n),
        **memory_fields(mem),
    )
    return rec
