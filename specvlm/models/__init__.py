"""Model loading: target + draft pairs, adapters per family."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from typing import Any

import torch

from specvlm.models.base import (Adapter, ModelInputs, ModelLoadError, TokenizerMismatchError,
                                 adapter_for, supported_model_types, video_geometry)
from specvlm.models.fit import (PresetTooLargeError, default_gpu_dtype, detect_gpus, estimate_pair,
                                model_size, plan_placement)
from specvlm.models.hub import hub_reachable

log = logging.getLogger(__name__)

__all__ = ["ModelPair", "load_pair", "pair_from_models", "with_draft_inputs", "ModelInputs", "ModelLoadError",
           "TokenizerMismatchError", "PresetTooLargeError", "adapter_for", "plan_device_map"]


@dataclass
class ModelPair:
    """A target (verifier) and a draft (proposer) sharing a tokenizer.

    Attributes:
        target: the full model (``...ForConditionalGeneration``).
        draft: the draft model; the same object as ``target`` for Self-SD.
        processor: the target's processor (chat template, video processor, tokenizer).
        adapter: the family adapter of the target.
        draft_adapter: the family adapter of the draft.
        name: display name.
        shared_vocab: ids compared between draft and target (min of the two LM-head sizes).
        draft_processor: the draft's processor when the draft cuts frames into a different token
            grid than the target (its own prompt; :attr:`ModelInputs.draft_inputs`), else None.
    """

    target: Any
    draft: Any
    processor: Any
    adapter: Adapter
    draft_adapter: Adapter
    name: str = ""
    shared_vocab: int = 0
    draft_processor: Any = None

    @property
    def self_sd(self) -> bool:
        """True when the draft is the target's own weights."""
        return self.draft is self.target

    @property
    def family(self) -> str:
        return self.adapter.family

    @property
    def frames_per_token(self) -> int:
        return self.adapter.frames_per_token

    @property
    def device(self) -> torch.device:
        return self.target.get_input_embeddings().weight.device

    @property
    def eos_token_ids(self) -> set[int]:
        """EOS ids from the target's generation config (plus the tokenizer's)."""
        ids: set[int] = set()
        gc = getattr(self.target, "generation_config", None)
        eos = getattr(gc, "eos_token_id", None) if gc is not None else None
        if isinstance(eos, int):
            ids.add(eos)
        elif eos:
            ids.update(int(e) for e in eos)
        tok = getattr(self.processor, "tokenizer", None)
        if tok is not None and tok.eos_token_id is not None:
            ids.add(int(tok.eos_token_id))
        return ids


def with_draft_inputs(pair: ModelPair, inputs: ModelInputs, clip: Any, prompt: str, subtitles: list | None = None,
                      subtitle_mode: str = "both") -> ModelInputs:
    """``inputs`` with the draft's own prompt attached when the pair needs one, else ``inputs`` itself.

    A draft with another video geometry (``pair.draft_processor``) gets the same frames, prompt and
    subtitle cues written by its own processor (:attr:`ModelInputs.draft_inputs`).

    Args:
        pair: the models.
        inputs: the target's prepared inputs.
        clip: the request's VideoClip (frames uint8 (T, H, W, 3)).
        prompt: the user text.
        subtitles: the cues given to the target's prompt, or None.
        subtitle_mode: who sees the transcript.

    Raises:
        ValueError: the pair needs the draft's prompt but no clip was given.

    Source: an extension of SpecVLM Sec. 3 (one tokenization) to drafts with their own token grid
    (:mod:`specvlm.regrid`).
    """
    if pair.draft_processor is None or inputs.draft_inputs is not None:
        return inputs
    if clip is None:
        raise ValueError("this draft reads its own prompt (another video geometry than the target's): pass the clip "
                         "with the prepared inputs.")
    if inputs.subtitle_text and not subtitles:
        log.info("the draft's own prompt is written without the subtitle transcript (no cues were passed)")
    kw = {"subtitles": list(subtitles), "subtitle_mode": subtitle_mode} if subtitles else {}
    d = pair.draft_adapter.prepare(pair.draft_processor, pair.draft, clip, prompt, **kw)
    return replace(inputs, draft_inputs=d)


def _vocab_size(model: Any) -> int:
    return int(model.get_output_embeddings().weight.shape[0])


def pair_from_models(target: Any, processor: Any, draft: Any | None = None, draft_processor: Any | None = None,
                     name: str = "", fast_attention: bool = True) -> ModelPair:
    """Wrap already-loaded models (tests, tiny models, custom code).

    Args:
        target: the target model.
        processor: the target's processor.
        draft: a smaller model of the same family and tokenizer, or None for Self-SD.
        draft_processor: the draft's processor: checks the tokenizer, and writes the draft's own
            prompt when the draft's video geometry differs from the target's (SmolVLM2-2.2B target,
            256M draft).
        fast_attention: switch both models to the grouped-query ``specvlm_gqa`` attention
            (:mod:`specvlm.fast`; SDPA for everything but short masked queries).

    Raises:
        TokenizerMismatchError: draft and target tokenizers differ on shared ids.
        ModelLoadError: unsupported family, or a draft of another video geometry without its processor.
    """
    adapter = adapter_for(target)
    if fast_attention:
        from specvlm.fast import use_fast_attention

        for m in {id(target): target, id(draft): draft}.values():
            if m is not None:
                use_fast_attention(m)
    if draft is None or draft is target:
        return ModelPair(target, target, processor, adapter, adapter, name or "Self-SD", _vocab_size(target))
    d_adapter = adapter_for(draft)
    if d_adapter.family != adapter.family:
        raise TokenizerMismatchError(
            f"draft family {d_adapter.family} differs from target family {adapter.family}: "
            "use a draft from the same model family (Std-SD).")
    if draft_processor is not None:
        _check_tokenizers(processor.tokenizer, draft_processor.tokenizer)
    t_geo, d_geo = video_geometry(adapter, target), video_geometry(d_adapter, draft)
    if t_geo != d_geo and draft_processor is None:
        raise ModelLoadError(f"the draft cuts frames into video tokens differently from the target ({d_geo} vs "
                             f"{t_geo}): pass the draft's processor (draft_processor) so it gets its own prompt.")
    shared = min(_vocab_size(target), _vocab_size(draft))
    return ModelPair(target, draft, processor, adapter, d_adapter, name or "Std-SD", shared,
                     draft_processor if t_geo != d_geo else None)


def _check_tokenizers(t_tok: Any, d_tok: Any) -> None:
    """Refuse tokenizers that really differ; padded vocab sizes are fine (docs/design.md §4)."""
    tv, dv = t_tok.get_vocab(), d_tok.get_vocab()
    common = set(tv) & set(dv)
    diff = [tok for tok in common if tv[tok] != dv[tok]]
    only = (set(tv) ^ set(dv))
    if diff or len(only) > max(64, 0.001 * len(tv)):
        raise TokenizerMismatchError(
            f"draft and target tokenizers differ ({len(diff)} tokens with different ids, {len(only)} tokens "
            "in only one): choose a draft with the same tokenizer as the target.")


def _resolve_dtype(dtype: str | torch.dtype | None, device: str, gpus: tuple = ()) -> torch.dtype:
    """The requested dtype, or the default: bf16 on GPUs that support it, fp16 on older GPUs, fp32 on CPU."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None:
        return default_gpu_dtype(gpus) if device.startswith("cuda") else torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if dtype not in table:
        raise ModelLoadError(f"dtype {dtype!r} is unknown: use float32, bfloat16 or float16.")
    return table[dtype]


def check_device(device: str) -> None:
    """Refuse devices this machine does not have, with a readable message.

    Raises:
        ModelLoadError: not a torch device string, or CUDA asked for without CUDA.
    """
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} was asked for but CUDA is not available on this machine: "
                             "use --device cpu.")
    try:
        torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise ModelLoadError(f"device {device!r} is not a valid torch device: use cpu, cuda or cuda:N.") from exc


def _looks_local(path: str) -> bool:
    return path.startswith(("/", "./", "../", "~")) or os.path.sep in path and path.count("/") > 1


def _one_line(exc: BaseException, limit: int) -> str:
    """An exception's message on one line (library messages span several), at most ``limit`` characters."""
    return " ".join(str(exc).split())[:limit].rstrip(". ")


def _load_one(path: str, device: str, dtype: torch.dtype, device_map: Any):
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

    if _looks_local(path) and not os.path.isdir(os.path.expanduser(path)):
        raise ModelLoadError(f"model folder {path!r} does not exist: give a folder saved with save_pretrained "
                             "(model and processor) or a Hub id such as Qwen/Qwen2.5-VL-7B-Instruct.")
    local = os.path.isdir(os.path.expanduser(path)) or not hub_reachable()
    hint = "" if os.path.isdir(os.path.expanduser(path)) else (
        " The Hugging Face Hub is not reachable from here, so only models already in the local cache load."
        if local else "")
    try:
        cfg = AutoConfig.from_pretrained(path, local_files_only=local)
    except Exception as exc:  # noqa: BLE001 - turned into one readable message
        raise ModelLoadError(
            f"could not load model {path!r}: {exc.__class__.__name__}: {_one_line(exc, 300)}.{hint} Use a "
            "local folder saved with save_pretrained or a Hub id of a Qwen2.5-VL / LLaVA-OneVision / SmolVLM2 / "
            "Qwen3-VL model (remote code is never run)."
        ) from exc
    if cfg.model_type not in supported_model_types():
        raise ModelLoadError(f"model {path!r} has type {cfg.model_type!r}: only "
                             f"{', '.join(supported_model_types())} are supported.")
    kwargs: dict[str, Any] = {"dtype": dtype, "attn_implementation": "sdpa", "local_files_only": local}
    if device_map:
        kwargs["device_map"] = device_map
    try:
        model = AutoModelForImageTextToText.from_pretrained(path, **kwargs).eval()
        processor = AutoProcessor.from_pretrained(path, local_files_only=local)
    except Exception as exc:  # noqa: BLE001
        raise ModelLoadError(f"could not load model {path!r}: {exc.__class__.__name__}: "
                             f"{_one_line(exc, 300)}.") from exc
    if not device_map:
        try:
            model.to(device)
        except (RuntimeError, AssertionError) as exc:
            raise ModelLoadError(f"could not move model {path!r} to {device!r}: {_one_line(exc, 200)}") from exc
    return model, processor


def plan_device_map(target: str, draft: str | None, device: str, dtype: torch.dtype,
                    gpus: tuple = ()) -> Any:
    """The ``device_map`` that loads a pair straight onto its GPU(s), after checking it fits.

    Args:
        target, draft: Hub ids or local folders (draft None = Self-SD).
        device: "cuda" or "cuda:i" (CPU devices need no map: returns None).
        dtype: the load dtype (2 or 4 bytes per parameter and cache entry).
        gpus: :func:`specvlm.models.fit.detect_gpus`.

    Returns:
        None on CPU; ``{"": device}`` when a model's size or the GPUs are unknown, or the pair fits one GPU;
        ``"auto"`` when it needs several GPUs (accelerate shards it).

    Raises:
        PresetTooLargeError: the estimate (:func:`specvlm.models.fit.estimate_pair` at the paper's
            16k video tokens) fits neither the GPU nor all GPUs together.
    """
    if not device.startswith("cuda"):
        return None
    t = model_size(target)
    d = model_size(draft) if draft and draft != target else None
    if not gpus or t is None or (draft and draft != target and d is None):
        return {"": device}
    name = target if not d else f"{target} + {draft}"
    placement = plan_placement(estimate_pair(t, d, torch.finfo(dtype).bits // 8), gpus, device, name)
    log.info("%s", placement.reason)
    return placement.device_map


def load_pair(target: str, draft: str | None = None, *, device: str | None = None, dtype: str | None = None,
              device_map: str | None = None) -> ModelPair:
    """Load a target (and optional Std-SD draft) by Hub id or local folder.

    On a GPU the weights load straight to the device (never staged in host RAM), in bfloat16
    where every GPU supports it and float16 otherwise, after :func:`plan_device_map` has checked
    that the pair fits; a pair that needs several GPUs is sharded with ``device_map="auto"``.
    Where the Hub is not reachable (:func:`specvlm.models.hub.hub_reachable`), Hub ids load from
    the local cache only, without network retries.

    Args:
        target: Hub id or local path of the target.
        draft: Hub id or local path of a smaller sibling (Std-SD); None = Self-SD.
        device: "cpu", "cuda", "cuda:1"...; default cuda when available.
        dtype: "float32" | "bfloat16" | "float16"; default bf16 (fp16 on GPUs without bf16) on CUDA,
            fp32 on CPU.
        device_map: overrides the planned placement, e.g. "auto" or {"": "cuda:1"} (accelerate).

    Returns:
        ModelPair, models in eval mode with sdpa attention.

    Raises:
        ModelLoadError: missing/unsupported model, or draft tokenizer mismatch.
        PresetTooLargeError: the pair cannot fit on the detected GPUs (one line: needed vs available).
    """
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    check_device(device)
    gpus = detect_gpus() if device.startswith("cuda") else ()
    dt = _resolve_dtype(dtype, device, gpus)
    if device_map is None:
        device_map = plan_device_map(target, draft, device, dt, gpus)
    log.info("loading target %s (%s, %s)", target, device, dt)
    t_model, t_proc = _load_one(target, device, dt, device_map)
    if draft is None or draft == target:
        return pair_from_models(t_model, t_proc, name=f"{target} (Self-SD)")
    log.info("loading draft %s", draft)
    d_model, d_proc = _load_one(draft, device, dt, device_map)
    return pair_from_models(t_model, t_proc, d_model, d_proc, name=f"{target} + {draft} (Std-SD)")
