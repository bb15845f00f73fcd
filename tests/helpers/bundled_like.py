"""Random stand-ins for the bundled pair, for tests of mechanics (plumbing, page wiring, API shapes, progress,
errors) that run the app's bundled presets: the bundled pair's own tokenizer, processor and configuration (so the
same prompts, video-token geometry and special ids), at a fraction of its width and depth with random weights.
Their cost does not grow when the bundled model does; only the tests about the bundled model itself (its accuracy,
token identity on it, the failure case) load ``assets/model``.
"""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from specvlm.models.presets import BUNDLED_DRAFT, BUNDLED_SELF, BUNDLED_STD, BUNDLED_TARGET, PRESETS

SKIP = ("config.json", "generation_config.json", "model.safetensors", "training_info.json", "loss_curve.png")
"""Files of a bundled folder the stand-in does not copy (its own config and weights are written)."""


def save_bundled_like(out: Path, *, layers: int, seed: int, source: Path = BUNDLED_TARGET, hidden: int = 128,
                      vision_depth: int = 1, std: float = 0.15) -> Path:
    """A random Qwen2.5-VL in ``out`` with ``source``'s tokenizer, processor and chat template: ``hidden`` wide
    (2 heads of the bundled head size, so its M-RoPE sections hold), ``layers`` decoder layers, a vision tower of
    ``vision_depth`` blocks (the last with full attention); weights N(0, ``std``) so greedy decoding is varied.
    Returns ``out``."""
    import torch
    from transformers import AutoConfig, Qwen2_5_VLForConditionalGeneration

    from specvlm.testing.tiny import _scale_init

    source, out = Path(source), Path(out)
    config = AutoConfig.from_pretrained(source)
    text, vision = config.text_config, config.vision_config
    head_dim = text.hidden_size // text.num_attention_heads
    text.hidden_size, text.num_attention_heads, text.num_key_value_heads = hidden, hidden // head_dim, 1
    text.intermediate_size, text.num_hidden_layers = 2 * hidden, layers
    text.layer_types = ["full_attention"] * layers
    vision.depth, vision.fullatt_block_indexes, vision.out_hidden_size = vision_depth, [vision_depth - 1], hidden
    vision.hidden_size, vision.intermediate_size, vision.num_heads = 64, 128, 2
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    _scale_init(model, std, seed)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for f in source.iterdir():
        if f.is_file() and f.name not in SKIP:
            shutil.copy2(f, out / f.name)
    shutil.copy2(source / "generation_config.json", out / "generation_config.json")
    return out


def bundled_like_pair(root: Path, layers: int = 2, vision_depth: int = 1) -> tuple[Path, Path]:
    """(target, draft) stand-ins of the bundled pair under ``root``, from the bundled target's and draft's own
    files: a target of ``layers`` decoder layers and a 1-layer draft of the same seed (the target's first layer,
    so the draft agrees with it at some steps and not at others), both with ``vision_depth`` vision blocks."""
    root = Path(root)
    return (save_bundled_like(root / "target", layers=layers, seed=0, vision_depth=vision_depth),
            save_bundled_like(root / "draft", layers=1, seed=0, source=BUNDLED_DRAFT, vision_depth=vision_depth))


def bundled_like_presets(target: Path, draft: Path, max_new_tokens: int | None = None) -> dict:
    """The bundled presets (:data:`BUNDLED_STD`, :data:`BUNDLED_SELF`) with their models replaced by the stand-ins
    (names, frames and trees unchanged; the budget ``max_new_tokens`` where given: random weights rarely end a
    text, the bundled pair ends it after about 20 tokens), for ``monkeypatch.setitem(PRESETS, name, preset)``."""
    budget = {} if max_new_tokens is None else {"max_new_tokens": max_new_tokens}
    return {BUNDLED_STD: dataclasses.replace(PRESETS[BUNDLED_STD], target=str(target), draft=str(draft), **budget),
            BUNDLED_SELF: dataclasses.replace(PRESETS[BUNDLED_SELF], target=str(target), **budget)}


_PAIRS: dict[tuple[int, int], tuple[Path, Path]] = {}


def stand_in_pair(layers: int = 2, vision_depth: int = 1) -> tuple[Path, Path]:
    """This process's (target, draft) stand-ins of that depth (:func:`bundled_like_pair`), written once to a
    temporary folder that is removed at exit."""
    key = (layers, vision_depth)
    if key not in _PAIRS:
        import atexit
        import tempfile

        root = Path(tempfile.mkdtemp(prefix="bundled-like-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        _PAIRS[key] = bundled_like_pair(root, layers, vision_depth)
    return _PAIRS[key]


def stand_in_engine(layers: int = 2, vision_depth: int = 1):
    """The app's real engine (:class:`app.runs.facade.SpecvlmFacade`) whose bundled presets load stand-ins of that
    depth (:func:`stand_in_pair`); every other preset as it is."""
    from app.runs.facade import SpecvlmFacade

    class StandInFacade(SpecvlmFacade):
        def presets(self):
            return super().presets() | bundled_like_presets(*stand_in_pair(layers, vision_depth))

    return StandInFacade()
