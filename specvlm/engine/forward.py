"""Forward primitives of the prefill: one language-model forward over a KV cache, token and prompt embeddings.

The prefills (:mod:`specvlm.engine.prefill`), the Inspect view's forwards and the step-cost measurements go
through :func:`lm_forward`; decode steps run over static buffers (:func:`specvlm.engine.steps.static_forward`).

Source: docs/design.md §4.1 and §7.
"""
from __future__ import annotations

from typing import Any

import torch

from specvlm.models.adapter import encode_video
from specvlm.types import ModelInputs


def device_of(model: Any) -> torch.device:
    """The device of the model's input embeddings."""
    return model.get_input_embeddings().weight.device


def lm_forward(model: Any, adapter: Any, embeds: torch.Tensor, positions: torch.Tensor, cache: Any,
               mask: torch.Tensor | None = None, rows: slice | None = slice(-1, None),
               extra: dict[str, Any] | None = None) -> torch.Tensor | None:
    """One language-model forward over ``n`` new tokens, appending to ``cache``.

    Args:
        model: a ``...ForConditionalGeneration`` model.
        adapter: its family adapter.
        embeds: float (1, n, D) input embeddings.
        positions: int64 (R, n) position ids.
        cache: KV cache holding P tokens; P + n afterwards.
        mask: float additive (1, 1, n, P + n) or None for plain causal attention.
        rows: which of the n rows to run the LM head on (None = none).
        extra: more language-model keywords for this chunk (the video tokens' side features,
            :func:`specvlm.models.adapter.video_lm_kwargs`), or None.

    Returns:
        logits float (rows, vocab), or None when ``rows`` is None.
    """
    dev = device_of(model)
    out = adapter.language_model(model)(
        inputs_embeds=embeds, position_ids=adapter.lm_positions(positions.to(dev)), attention_mask=mask,
        cache=cache, use_cache=True, **(extra or {}),
    )
    if rows is None:
        return None
    return model.get_output_embeddings()(out.last_hidden_state[0, rows])


def embed_tokens(model: Any, token_ids: list[int] | torch.Tensor) -> torch.Tensor:
    """Token ids -> float (1, n, D) embeddings on the model's device."""
    ids = torch.as_tensor(token_ids, dtype=torch.long, device=device_of(model)).reshape(1, -1)
    return model.get_input_embeddings()(ids)


def prompt_video(model: Any, adapter: Any, inputs: ModelInputs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Prompt embeddings with the video encoder's features at the video positions, and side features.

    The video encoder runs once here (per model).

    Returns:
        (float (1, L, D) embeddings, float (S, V, D) side features or None; see
        :class:`specvlm.models.adapter.VideoEncoding`).

    Raises:
        ValueError: the encoder's features do not match the prompt's video tokens.
    """
    enc = encode_video(adapter, model, inputs)
    feats = enc.features
    emb = model.get_input_embeddings()(inputs.input_ids.to(device_of(model))).clone()
    if feats.shape[0] != inputs.num_video_tokens:
        raise ValueError(f"video features ({feats.shape[0]}) and video tokens ({inputs.num_video_tokens}) do "
                         "not match: the prompt must contain exactly one video placeholder.")
    emb[0, inputs.video_index.to(emb.device)] = feats.to(emb.dtype)
    return emb, enc.side


def is_video(inputs: ModelInputs) -> torch.Tensor:
    """Bool (L,): which prompt positions hold video tokens."""
    flags = torch.zeros(inputs.input_ids.shape[1], dtype=torch.bool)
    flags[inputs.video_index] = True
    return flags
