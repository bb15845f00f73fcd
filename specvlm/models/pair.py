"""A target and a draft sharing a tokenizer: :class:`ModelPair`, built from loaded models.

Source: docs/design.md §2-3 (Self-SD and Std-SD pairs; padded vocabularies, §4).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import torch

from specvlm.models.attention import use_fast_attention
from specvlm.models.layout import use_right_operand_layout
from specvlm.models.stopping import install_stop_checks
from specvlm.models.adapter import Adapter, video_geometry
from specvlm.models.errors import ModelLoadError, TokenizerMismatchError
from specvlm.models.registry import adapter_for
from specvlm.types import ModelInputs

log = logging.getLogger(__name__)


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
    (:mod:`specvlm.spec.grid`).
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
                     name: str = "") -> ModelPair:
    """Wrap already-loaded models (tests, tiny models, custom code).

    The pair takes the models over: once, here, their language models are set to this engine's
    attention (``specvlm_gqa``, :mod:`specvlm.models.attention`; transformers' SDPA path for everything
    but the engine's short masked queries, so ``model.generate()`` still works), and their layers get
    the engine's stop check (:func:`specvlm.models.stopping.install_stop_checks`: inert unless a
    request with ``should_stop`` is prefilling on that thread). On a CPU their decoder's float32 linear
    weights are stored as right-hand matmul operands (:func:`specvlm.models.layout.use_right_operand_layout`:
    same values and shapes, faster multi-row verify and draft levels). Nothing about the models changes after
    that: decoding requests choose their attention and stop callback per call, so concurrent requests
    on one pair do not disturb each other.

    Args:
        target: the target model.
        processor: the target's processor.
        draft: a smaller model of the same family and tokenizer, or None for Self-SD.
        draft_processor: the draft's processor: checks the tokenizer, and writes the draft's own
            prompt when the draft's video geometry differs from the target's (SmolVLM2-2.2B target,
            256M draft).
        name: display name (default "Self-SD" / "Std-SD").

    Raises:
        TokenizerMismatchError: draft and target tokenizers differ on shared ids.
        ModelLoadError: unsupported family, or a draft of another video geometry without its processor.
    """
    adapter = adapter_for(target)
    use_right_operand_layout(adapter.language_model(target))
    if draft is None or draft is target:
        use_fast_attention(target)
        install_stop_checks(target, adapter.language_model(target))
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
    use_right_operand_layout(d_adapter.language_model(draft))
    use_fast_attention(target)
    use_fast_attention(draft)
    install_stop_checks(target, adapter.language_model(target))
    install_stop_checks(draft, d_adapter.language_model(draft))
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
