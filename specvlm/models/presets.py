"""Named model pairs (target + draft) with the paper's settings.

The bundled pair (a small Qwen2.5-VL target and a 1-layer draft with the same tokenizer,
trained on synthetic shape videos; ``assets/model/``, found by :func:`specvlm.assets.path`) is the default
offline; with CUDA the default is Qwen3-VL-8B with the Qwen3-VL-2B draft (Std-SD, :data:`GPU_DEFAULTS`),
and on a CPU with the Hub reachable the SmolVLM2 500M + 256M pair (a real video LLM; the 500M and 256M
models share a tokenizer and a 64-tokens-per-frame geometry).

Every GPU preset whose decoder dimensions are known states its byte ceiling (:attr:`Preset.ceiling`,
:mod:`specvlm.models.ceiling`): on a GPU a decode step is bound by the bytes it reads, and a Self-SD draft
reads the target's whole weights, so a 7B Self-SD pair cannot beat vanilla decoding at long video (the
description says so); a small draft of the same family and tokenizer can.

The bundled sparse pair (``assets/model_sparse/``: the same sizes, trained further on long clips whose
information is small, brief or only in the subtitles) is a choice, never a default: on it Stage I beats
random pruning, and subtitles withheld from the draft make speculation fail.

The bundled large pair (``assets/model_large/``: a 28.6M-parameter target grown from the sparse target and
trained further on the same mix, and a 1-layer draft distilled from it) is a choice too: its target reads
~107 MB of fp32 weights from memory at every decode step, more than a CPU's cache holds, which is the regime
real video LLMs decode in and where verifying several tokens costs little more than one step.

Source: SpecVLM (arXiv 2508.16201) Sec. 4.1 (model pairs, 64 frames for
LLaVA-OV, ~128 frames for Qwen2.5-VL, r = 0.9, λ = 0.4); docs/design.md §5.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from specvlm import assets
from specvlm.config import (BUNDLED_SELF_TREE, BUNDLED_STD_TREE, CPU_MAX_NEW_TOKENS, DecodeConfig, PruneConfig,
                            TreeConfig, VideoConfig, tree_with_options)
from specvlm.models.ceiling import Ceiling, ceiling_note, preset_ceiling

BUNDLED_TARGET = assets.path("model", "target")
BUNDLED_DRAFT = assets.path("model", "draft")
SPARSE_TARGET = assets.path("model_sparse", "target")
SPARSE_DRAFT = assets.path("model_sparse", "draft")
LARGE_TARGET = assets.path("model_large", "target")
LARGE_DRAFT = assets.path("model_large", "draft")


@dataclass(frozen=True)
class Preset:
    """A named target/draft pair.

    Attributes:
        name: display name.
        target: Hub id or local path of the target.
        draft: Hub id or local path of the Std-SD draft, or None for Self-SD.
        description: one line for the UI.
        num_frames: frames sampled by default.
        requires_cuda: True for models too large for a CPU.
        max_new_tokens: default generation budget.
        tree: the draft tree that suits this pair (one home for the tuned trees:
            :mod:`specvlm.config`); the description names it.
        ceiling: the pair's byte ceiling on a GPU at its frames (:func:`specvlm.models.ceiling.preset_ceiling`;
            None for CPU presets and models of unknown dimensions); computed, and stated in the description
            with, where the pair cannot beat vanilla decoding, why (:func:`specvlm.models.ceiling.ceiling_note`).
    """

    name: str
    target: str
    draft: str | None
    description: str
    num_frames: int = VideoConfig.num_frames
    requires_cuda: bool = True
    max_new_tokens: int = DecodeConfig.max_new_tokens
    tree: TreeConfig = field(default_factory=TreeConfig)
    ceiling: Ceiling | None = field(default=None, init=False, compare=False)

    def __post_init__(self) -> None:
        label = f"draft: {self.tree.describe()}"
        if label not in self.description:
            object.__setattr__(self, "description", f"{self.description}; {label}")
        if self.requires_cuda:
            ceiling = preset_ceiling(self.target, self.draft, self.num_frames, self.tree.depth)
            object.__setattr__(self, "ceiling", ceiling)
            if ceiling is not None and ceiling.describe() not in self.description:
                note = ceiling_note(ceiling, self_sd=self.draft is None)
                object.__setattr__(self, "description", f"{self.description}. {ceiling.describe()}"
                                                        + (f". {note}" if note else ""))


BUNDLED_STD = "Bundled tiny (CPU, Std-SD)"
BUNDLED_SELF = "Bundled tiny (CPU, Self-SD)"
SPARSE_STD = "Bundled sparse (CPU, Std-SD)"
SPARSE_SELF = "Bundled sparse (CPU, Self-SD)"
BUNDLED_LARGE_STD = "Bundled large (CPU, Std-SD)"
BUNDLED_LARGE_SELF = "Bundled large (CPU, Self-SD)"
QWEN7_SELF = "Qwen2.5-VL-7B Self-SD"
QWEN7_3B = "Qwen2.5-VL-7B + 3B draft"
QWEN3_8B_2B = "Qwen3-VL-8B + 2B draft"
SMOLVLM2_CPU = "SmolVLM2-500M + 256M draft (CPU)"
SMOLVLM2_2B = "SmolVLM2-2.2B + 256M draft"

PRESETS: dict[str, Preset] = {p.name: p for p in [
    Preset(BUNDLED_STD, str(BUNDLED_TARGET), str(BUNDLED_DRAFT),
           "Small Qwen2.5-VL trained on synthetic shape videos + 1-layer draft (offline, CPU)",
           num_frames=32, requires_cuda=False, max_new_tokens=CPU_MAX_NEW_TOKENS, tree=BUNDLED_STD_TREE),
    Preset(BUNDLED_SELF, str(BUNDLED_TARGET), None,
           "The bundled target drafting for itself on ~10% of the video tokens (on a CPU every draft level reads "
           "all of its weights: slower than vanilla on short clips, it shows τ)",
           num_frames=32, requires_cuda=False, max_new_tokens=CPU_MAX_NEW_TOKENS, tree=BUNDLED_SELF_TREE),
    Preset(SPARSE_STD, str(SPARSE_TARGET), str(SPARSE_DRAFT),
           "The bundled sizes trained on long clips with small, brief objects and facts said only in the "
           "subtitles: Stage I matters here, and subtitles withheld from the draft make speculation fail "
           "(offline, CPU)", num_frames=32, requires_cuda=False, max_new_tokens=CPU_MAX_NEW_TOKENS,
           tree=BUNDLED_STD_TREE),
    Preset(SPARSE_SELF, str(SPARSE_TARGET), None,
           "The bundled sparse target drafting for itself on ~10% of the video (Stage I beats random pruning; "
           "slower than vanilla on short clips on a CPU, it shows τ)",
           num_frames=32, requires_cuda=False, max_new_tokens=CPU_MAX_NEW_TOKENS, tree=BUNDLED_SELF_TREE),
    Preset(BUNDLED_LARGE_STD, str(LARGE_TARGET), str(LARGE_DRAFT),
           "A 28.6M-parameter Qwen2.5-VL grown from the sparse target and trained further on its clips, with a "
           "1-layer draft. Every decode step reads the target's ~107 MB of weights from memory, as a real video "
           "LLM's does, so verifying several drafted tokens costs little more than one step and the small draft "
           "a fraction of it (offline, CPU)", num_frames=32, requires_cuda=False,
           max_new_tokens=CPU_MAX_NEW_TOKENS, tree=BUNDLED_STD_TREE),
    Preset(BUNDLED_LARGE_SELF, str(LARGE_TARGET), None,
           "The bundled large target drafting for itself on ~10% of the video (on a CPU every draft level reads "
           "all of its weights: it shows τ, not speed)",
           num_frames=32, requires_cuda=False, max_new_tokens=CPU_MAX_NEW_TOKENS, tree=BUNDLED_SELF_TREE),
    Preset(QWEN3_8B_2B, "Qwen/Qwen3-VL-8B-Instruct", "Qwen/Qwen3-VL-2B-Instruct",
           "Std-SD with a small draft of the same family and tokenizer (both: vocabulary 151,936, patch 16, "
           "merge 2, so the same video tokens); the draft runs its own vision tower once (r = 0.9, lambda = 0.4)",
           num_frames=128),
    Preset(QWEN7_3B, "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen2.5-VL-3B-Instruct",
           "Std-SD with a small draft of the same family and tokenizer (patch 14, merge 2, the same video tokens; "
           "the 3B's LM head has 151,936 rows, the 7B's 152,064 padded ones: compared over the shared ids)",
           num_frames=128),
    Preset(QWEN7_SELF, "Qwen/Qwen2.5-VL-7B-Instruct", None,
           "Qwen2.5-VL-7B drafting for itself (paper: tau ~ 3.8-4.0)", num_frames=128),
    Preset("Qwen2.5-VL-32B + 7B draft", "Qwen/Qwen2.5-VL-32B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct",
           "Std-SD, paper: up to 2.11x", num_frames=128),
    # Qwen3-VL: dense and MoE share one tokenizer, so the MoE target takes the dense 8B draft; r = 0.9 and
    # lambda = 0.4 (the paper's defaults, specvlm.config.PruneConfig) apply unchanged
    Preset("Qwen3-VL-8B Self-SD", "Qwen/Qwen3-VL-8B-Instruct", None,
           "Qwen3-VL-8B drafting for itself (r = 0.9, lambda = 0.4)", num_frames=128),
    Preset("Qwen3-VL-32B + 8B draft", "Qwen/Qwen3-VL-32B-Instruct", "Qwen/Qwen3-VL-8B-Instruct",
           "Std-SD, dense 32B target, 8B draft (r = 0.9, lambda = 0.4)", num_frames=128),
    Preset("Qwen3-VL-30B-A3B + 8B draft", "Qwen/Qwen3-VL-30B-A3B-Instruct", "Qwen/Qwen3-VL-8B-Instruct",
           "Std-SD, MoE target (3B active), dense 8B draft, shared tokenizer (r = 0.9, lambda = 0.4)",
           num_frames=128),
    Preset("LLaVA-OneVision-7B Self-SD", "llava-hf/llava-onevision-qwen2-7b-ov-hf", None,
           "LLaVA-OV-7B drafting for itself", num_frames=64),
    Preset("LLaVA-OneVision-72B + 7B draft", "llava-hf/llava-onevision-qwen2-72b-ov-hf",
           "llava-hf/llava-onevision-qwen2-7b-ov-hf", "Std-SD, paper: up to 2.68x", num_frames=64),
    Preset(SMOLVLM2_CPU, "HuggingFaceTB/SmolVLM2-500M-Video-Instruct", "HuggingFaceTB/SmolVLM2-256M-Video-Instruct",
           "Real video LLM small enough for a CPU (downloaded from the Hub); Std-SD, 64 tokens per frame for both; "
           "SpecVLM r = 0.9, λ = 0.4 (the paper's defaults, not tuned for SmolVLM2)",
           num_frames=16, requires_cuda=False, max_new_tokens=CPU_MAX_NEW_TOKENS),
    Preset(SMOLVLM2_2B, "HuggingFaceTB/SmolVLM2-2.2B-Instruct", "HuggingFaceTB/SmolVLM2-256M-Video-Instruct",
           "Std-SD across geometries: the target reads 81 tokens per frame, the draft its own prompt with 64, "
           "the kept set carried over by spatial overlap; SpecVLM r = 0.9, λ = 0.4 (the paper's defaults)",
           num_frames=32),
]}


def preset_available(preset: Preset) -> bool:
    """True when a preset's models can be loaded: local folders exist, or each Hub id is in the local
    cache or the Hub is reachable (:func:`specvlm.models.hub.hub_reachable`, asked at most once)."""
    from specvlm.models.hub import hub_reachable, in_local_cache

    def ok(path: str) -> bool:
        if Path(path).is_absolute():
            return Path(path).exists()
        return in_local_cache(path) or hub_reachable()

    return all(ok(p) for p in (preset.target, preset.draft) if p)


GPU_DEFAULTS = (QWEN3_8B_2B, QWEN7_3B)
"""The presets a user gets with CUDA, the first that can be loaded: Std-SD pairs whose small draft lets them
beat vanilla decoding on a GPU (byte ceiling at 16k video tokens ~1.96x / ~1.30x at τ 3, against ~0.70x for
Qwen2.5-VL-7B Self-SD, :mod:`specvlm.models.ceiling`). The Space preloads the first one's models."""


def default_preset_name() -> str:
    """The preset a user gets without choosing one.

    With CUDA: the first of :data:`GPU_DEFAULTS` that can be loaded (cached or Hub reachable). Without CUDA
    and with the Hub reachable (:func:`specvlm.models.hub.hub_reachable`): the SmolVLM2 500M + 256M
    pair, a real video LLM that runs on a CPU. Otherwise (offline, or no GPU default available): the
    bundled pair, which only knows synthetic shape videos.
    """
    from specvlm.models.hub import hub_reachable

    if torch.cuda.is_available():
        return next((name for name in GPU_DEFAULTS if preset_available(PRESETS[name])), BUNDLED_STD)
    return SMOLVLM2_CPU if hub_reachable() else BUNDLED_STD


def preset_defaults(preset: Preset | None, cuda: bool = True) -> Preset:
    """What a run uses where a person set nothing: the preset itself, or for a model without a preset
    (None) the library's defaults (``VideoConfig.num_frames``, ``DecodeConfig.max_new_tokens``,
    ``TreeConfig()``) under an empty name. The one mapping of the CLI and the app.

    Args:
        preset: the chosen preset, or None for a model that has none.
        cuda: False when the run decodes on a CPU: then a model without a preset gets
            :data:`specvlm.config.CPU_MAX_NEW_TOKENS` new tokens.

    Source: docs/design.md §5 (presets).
    """
    if preset is not None:
        return preset
    return Preset("", "", None, "", max_new_tokens=DecodeConfig.max_new_tokens if cuda else CPU_MAX_NEW_TOKENS)


@dataclass(frozen=True)
class PresetSettings:
    """The preset-dependent settings of one run, resolved (:func:`resolve_settings`).

    Attributes:
        num_frames: frames to sample.
        max_new_tokens: generation budget (tokens).
        tree: the draft tree (:class:`specvlm.config.TreeConfig`, with the preset's long-prompt tree when no tree
            option changed it).
    """

    num_frames: int
    max_new_tokens: int
    tree: TreeConfig


def resolve_settings(preset: Preset | None, *, cuda: bool = True,
                     budget: Callable[[int, int], tuple[int, int]] | None = None, num_frames: int | None = None,
                     max_new_tokens: int | None = None, shape: str | None = None, depth: int | None = None,
                     top_k: int | None = None, total_tokens: int | None = None,
                     min_prob: float | None = None) -> PresetSettings:
    """The one preset resolver of the CLI, the page and the API: each setting the caller gave, else the preset's.

    Frames and new tokens left unset (None) are the preset's (:func:`preset_defaults`; ``budget`` may cap the
    pair, e.g. ZeroGPU's suggested budget); the tree is the preset's combined with the tree options given
    (:func:`specvlm.config.tree_with_options`: an option equal to the preset's changes nothing, so its
    long-prompt tree stays).

    Args:
        preset: the chosen preset, or None for a model without one (the library's defaults).
        cuda: whether the run decodes on CUDA (a model without a preset gets the CPU budget otherwise).
        budget: ``(frames, tokens) -> (frames, tokens)`` applied to the preset's suggestion (None: as it is).
        num_frames, max_new_tokens, shape, depth, top_k, total_tokens, min_prob: the caller's settings;
            None = not set.

    Returns:
        The resolved :class:`PresetSettings`.

    Raises:
        ConfigError: an out-of-range tree option.

    Source: docs/design.md §5 (presets).
    """
    p = preset_defaults(preset, cuda)
    frames, tokens = (budget or (lambda f, t: (f, t)))(int(p.num_frames), int(p.max_new_tokens))
    base = getattr(p, "tree", None)   # a preset named by an app's engine may carry no tree: TreeConfig()
    return PresetSettings(num_frames=frames if num_frames is None else num_frames,
                          max_new_tokens=tokens if max_new_tokens is None else max_new_tokens,
                          tree=tree_with_options(base if isinstance(base, TreeConfig) else None, shape=shape,
                                                 depth=depth, top_k=top_k, total_tokens=total_tokens,
                                                 min_prob=min_prob))


def default_preset() -> Preset:
    """The :func:`default_preset_name` preset."""
    return PRESETS[default_preset_name()]


# --------------------------------------------------------------------------- paper settings
@dataclass(frozen=True)
class PaperSetting:
    """The paper's evaluation settings for one model pair.

    Attributes:
        name: preset name (``--preset``).
        target: Hub id of the target.
        draft: Hub id of the Std-SD draft, or None for Self-SD.
        num_frames: frames sampled per video.
        max_pixels: per-frame pixel cap (H*W).
        drop_rate: r, share of video tokens the draft does not see.
        top_p: λ, Stage I attention share.
        max_new_tokens: generation budget (tokens).
        dataset: the benchmark the paper reports speedups on.
        description: one line.
    """

    name: str
    target: str
    draft: str | None
    num_frames: int
    max_pixels: int = VideoConfig.max_pixels
    drop_rate: float = PruneConfig.drop_rate
    top_p: float = PruneConfig.top_p
    max_new_tokens: int = DecodeConfig.max_new_tokens
    dataset: str = "videodetailcaption"
    description: str = ""


QWEN7, QWEN32 = "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen2.5-VL-32B-Instruct"
LLAVA7, LLAVA72 = "llava-hf/llava-onevision-qwen2-7b-ov-hf", "llava-hf/llava-onevision-qwen2-72b-ov-hf"
PAPER_SETTINGS: dict[str, PaperSetting] = {s.name: s for s in (
    PaperSetting("paper-qwen", QWEN32, QWEN7, 128, description="Qwen2.5-VL-32B + 7B draft (paper: up to 2.11x)"),
    PaperSetting("paper-qwen-self", QWEN7, None, 128, description="Qwen2.5-VL-7B Self-SD (paper: ~1.5x, τ ~3.8-4.4)"),
    PaperSetting("paper-llava", LLAVA72, LLAVA7, 64, description="LLaVA-OV-72B + 7B draft (paper: up to 2.68x)"),
    PaperSetting("paper-llava-self", LLAVA7, None, 64, description="LLaVA-OV-7B Self-SD (paper: ~1.26x)"),
)}
"""Paper settings: 128 frames at <= 448x448 px for Qwen2.5-VL, 64 frames for LLaVA-OneVision
(196 tokens per frame + 1 newline), r = 0.9, λ = 0.4, 256 new tokens (docs/design.md §5)."""
