"""Frozen configuration dataclasses; every default lives here.

Validation happens in ``__post_init__`` and raises :class:`ConfigError` (a ``ValueError``) with a message
that names the setting and the valid range, so the CLI and the app can show it as-is.

Source: SpecVLM (Ji et al., EMNLP 2025, arXiv 2508.16201), Sec. 3 and 4 for the defaults r = 0.9, λ = 0.4;
EAGLE-2 (Li et al. 2024) for the dynamic tree.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field, replace

PRUNE_METHODS = ("specvlm", "none", "random", "uniform", "window-front", "window-middle", "window-end", "frame",
                 "attention")
"""Video-token pruning methods for the draft (docs/design.md §4.6)."""

DECODE_METHODS = ("vanilla",) + PRUNE_METHODS
"""``vanilla`` = plain greedy decoding with the target; the rest are speculative."""

TREE_SHAPES = ("dynamic", "static", "chain")

DEFAULT_PROMPT = "Describe this video in detail."
"""The prompt used when none is given (CLI, app, bench); the bundled CPU model was trained on it."""


class ConfigError(ValueError):
    """A setting is out of range; the message names the setting and the valid range."""


def _check_range(name: str, value: float, lo: float, hi: float) -> None:
    if not (lo <= value <= hi):
        raise ConfigError(f"{name}={value!r} is out of range: use a value in [{lo}, {hi}].")


@dataclass(frozen=True)
class PruneConfig:
    """How the draft's video tokens are chosen.

    Attributes:
        method: one of :data:`PRUNE_METHODS`.
        drop_rate: r, the share of video tokens the draft does NOT see, in [0, 1).
            Kept count K = max(1, floor(V * (1 - r))).
        top_p: λ, Stage I's cumulative attention share (top-p retention), in [0, 1].
        seed: RNG seed for ``random``.
        adaptive_r: choose r per clip from the Stage I scores instead of ``drop_rate``: r = 1 - k / V for the
            fewest k most-attended video tokens holding ``r_mass`` of the attention, bounded to [``r_min``,
            ``r_max``] (:func:`specvlm.spec.adaptive.adaptive_drop_rate`); methods without scores keep ``drop_rate``.
        r_min, r_max: the adaptive r's bounds, 0 <= r_min <= r_max < 1; r_mass: its attention share, in (0, 1].

    Raises:
        ConfigError: unknown method or out-of-range value.
    """

    method: str = "specvlm"
    drop_rate: float = 0.9
    top_p: float = 0.4
    seed: int = 0
    adaptive_r: bool = False
    r_min: float = 0.75
    r_max: float = 0.95
    r_mass: float = 0.8

    def __post_init__(self) -> None:
        if self.method not in PRUNE_METHODS:
            raise ConfigError(f"pruning method {self.method!r} is unknown: use one of {', '.join(PRUNE_METHODS)}.")
        _check_range("drop_rate", float(self.drop_rate), 0.0, 0.999)
        _check_range("top_p", float(self.top_p), 0.0, 1.0)
        for name, lo, hi in (("r_min", 0.0, 0.999), ("r_max", float(self.r_min), 0.999), ("r_mass", 1e-6, 1.0)):
            _check_range(name, float(getattr(self, name)), lo, hi)


RESELECT_TRIGGERS = ("refused", "every")   # when re-selection acts (ReselectConfig.trigger)


@dataclass(frozen=True)
class ReselectConfig:
    """Re-selection: the draft's video tokens follow the generation (:mod:`specvlm.engine.reselection`).

    After a verify step, when more than ``min_share`` of the target's video attention from the position that
    chose the next token falls on video tokens the draft lacks, the most attended of them enter the draft's
    cache at their original positions. The output does not change (the target verifies every token).

    Attributes:
        enabled: re-select during decoding (off = the paper's one selection at prefill).
        min_share: share of that position's video attention on tokens the draft lacks above which a step
            re-selects, in [0, 1].
        step_tokens: most video tokens added at one step (1..4096); total_tokens: most added per request.
        trigger: ``refused`` (steps whose draft the target refused) or ``every`` (every step, from the
            position after the accepted path); :data:`RESELECT_TRIGGERS`.
        track: also add each picked token's cell in up to this many frame groups either side (0..64).
        sync: Self-SD on the target's own prompt: at each measured step the draft's cache becomes the
            target's keys and values at every token it holds (its own drift: they saw the pruned context).

    Raises:
        ConfigError: an out-of-range value or unknown trigger.
    """

    enabled: bool = False
    min_share: float = 0.2
    step_tokens: int = 64
    total_tokens: int = 512
    trigger: str = "every"
    track: int = 0
    sync: bool = True

    def __post_init__(self) -> None:
        if self.trigger not in RESELECT_TRIGGERS:
            raise ConfigError(f"reselect trigger {self.trigger!r} is unknown: use {' or '.join(RESELECT_TRIGGERS)}.")
        for name, lo, hi in (("min_share", 0.0, 1.0), ("step_tokens", 1, 4096), ("total_tokens", 1, 1_000_000),
                             ("track", 0, 64)):
            _check_range(f"reselect {name}", getattr(self, name), lo, hi)


@dataclass(frozen=True)
class TreeConfig:
    """Shape of the draft tree (docs/design.md §4.8).

    Attributes:
        shape: ``dynamic`` (EAGLE-2 style), ``static`` (fixed paths) or ``chain``.
        depth: maximum number of drafted tokens along one path (1..16).
        top_k: children per expanded node and frontier width for ``dynamic`` (1..16).
        total_tokens: drafted nodes kept after reranking for ``dynamic`` (1..128).
        static_preset: name of a static tree in :data:`specvlm.spec.tree.STATIC_TREES`.
        min_prob: stop drafting deeper once the best frontier node's cumulative draft probability (product
            of the draft's probabilities along its path, i.e. its estimated chance of being accepted) falls
            below this, in [0, 1); 0 = always draft ``depth`` levels. The level where it falls below is still
            drafted and verified; only deeper levels are skipped. Saves draft forwards and verify slots that
            would rarely be accepted. Greedy output stays token-identical and sampled output keeps the
            target's distribution (any tree is verified exactly), though with sampling the same seed may give
            a different text once the tree shape changes. ``dynamic`` and ``chain`` only (a ``static`` tree
            has a fixed shape and ignores it).
            Source: the confidence stop of dynamic speculation lookahead (Mamou et al. 2024, arXiv 2405.04304;
            transformers' ``assistant_confidence_threshold``), applied to the cumulative path probability
            that EAGLE-2 ranks nodes by.
        long_prompt: the tree to use instead for prompts of at least ``long_from`` tokens, or None. On a long
            prompt the target's step costs more while the draft's (on ~10% of the video) barely grows, so a
            deeper draft pays (:func:`for_prompt`).
        long_from: prompt tokens from which ``long_prompt`` applies (>= 1).

    Raises:
        ConfigError: unknown shape or out-of-range value.
    """

    shape: str = "dynamic"
    depth: int = 5
    top_k: int = 4
    total_tokens: int = 16
    static_preset: str = "official-25"
    min_prob: float = 0.0
    long_prompt: "TreeConfig | None" = None
    long_from: int = 8192

    def __post_init__(self) -> None:
        if self.shape not in TREE_SHAPES:
            raise ConfigError(f"tree shape {self.shape!r} is unknown: use one of {', '.join(TREE_SHAPES)}.")
        _check_range("depth", int(self.depth), 1, 16)
        _check_range("top_k", int(self.top_k), 1, 16)
        _check_range("total_tokens", int(self.total_tokens), 1, 128)
        m = self.min_prob
        if isinstance(m, bool) or not isinstance(m, numbers.Real):
            raise ConfigError(f"min_prob={m!r} is not a number: use a value in [0, 1) (0 = off).")
        if not (0.0 <= float(m) < 1.0):
            raise ConfigError(f"min_prob={m!r} is out of range: use a value in [0, 1) (0 = off).")
        _check_range("long_from", int(self.long_from), 1, 10**9)
        if self.long_prompt is not None and not isinstance(self.long_prompt, TreeConfig):
            raise ConfigError(f"long_prompt={self.long_prompt!r} is not a TreeConfig.")

    def for_prompt(self, prompt_tokens: int) -> "TreeConfig":
        """The tree for a prompt of ``prompt_tokens`` tokens: ``long_prompt`` from ``long_from`` on, else this one."""
        if self.long_prompt is not None and prompt_tokens >= self.long_from:
            return self.long_prompt
        return self

    def without_long_prompt(self) -> "TreeConfig":
        """This tree for every prompt length (e.g. once a user set the tree options explicitly)."""
        return replace(self, long_prompt=None) if self.long_prompt is not None else self

    def describe(self) -> str:
        """The tree in a few words for the UI, e.g. ``dynamic tree (depth 6, top-4, 16 nodes, stop < 0.05)``."""
        stop = f", stop < {self.min_prob:g}" if self.min_prob > 0 and self.shape != "static" else ""
        if self.shape == "chain":
            text = f"chain of up to {self.depth}{stop}"
        elif self.shape == "static":
            text = f"static tree {self.static_preset}"
        else:
            text = f"dynamic tree (depth {self.depth}, top-{self.top_k}, {self.total_tokens} nodes{stop})"
        if self.long_prompt is not None:
            text += f"; from {self.long_from:,} prompt tokens: {self.long_prompt.describe()}"
        return text


BUNDLED_STD_TREE = TreeConfig(shape="chain", depth=4, min_prob=0.0,
                              long_prompt=TreeConfig(shape="chain", depth=12, min_prob=0.1), long_from=8192)
"""Draft tree of the bundled Std-SD pair (assets/model: 4-layer target, 1-layer draft) on a CPU.

A chain of 4 without an early stop; from 8,192 prompt tokens on, a chain of up to 12 with early stop 0.1, where a
verify costs more decode steps' worth and longer chains pay. On a CPU every draft level reads the draft's
weights, so on short captions a short chain wins (the trees compared and their figures:
docs/benchmark.md, *The engine on a CPU*). The bundled large pair (assets/model_large: 9-layer 28.6M target) uses
it too: on the example clips it gave a 2.25x median decode speedup against 2.21x for a chain of 6 with early stop
0.1, and a higher minimum (1.41x against 1.21x; docs/bench/speed/speed_check_large_*.json).
"""
BUNDLED_SELF_TREE = TreeConfig(shape="chain", depth=12, min_prob=0.1)
"""Draft tree of the bundled pair in Self-SD (the 4-layer target drafting on ~10% of the video).

The draft is the whole target, so every draft level costs a sizeable share of a target step and
wide levels lose; its accepted lengths are long, so a deep chain with an early stop drafts them at one node
per level (chosen as :data:`BUNDLED_STD_TREE`; figures in docs/benchmark.md).
"""


_MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class SamplingConfig:
    """How the next token is chosen.

    Attributes:
        temperature: softmax temperature in [0, 5]; 0 = greedy (argmax).
        top_p_sampling: nucleus mass in (0, 1]; 1 = no filtering. (Named so it does not clash
            with the pruning λ, ``PruneConfig.top_p``.)
        seed: seed of the request's generator, an int in [0, 2**63 - 1].

    Raises:
        ConfigError: out-of-range value.
    """

    temperature: float = 0.0
    top_p_sampling: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        t, p = self.temperature, self.top_p_sampling
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not (0.0 <= t <= 5.0):
            raise ConfigError(f"temperature={t!r} is out of range: use a value in [0, 5] (0 = greedy).")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not (0.0 < p <= 1.0):
            raise ConfigError(f"top_p_sampling={p!r} is out of range: use a value in (0, 1] (1 = off).")
        s = self.seed
        if isinstance(s, bool) or not isinstance(s, int) or not (0 <= s <= _MAX_SEED):
            raise ConfigError(f"seed={s!r} is out of range: use an integer in [0, {_MAX_SEED}].")

    @property
    def greedy(self) -> bool:
        """True when temperature is 0 (argmax decoding, the exact greedy path)."""
        return self.temperature == 0


_NESTED = (("prune", PruneConfig, "PruneConfig(drop_rate=0.9, top_p=0.4)"),
           ("tree", TreeConfig, "TreeConfig(shape='dynamic', depth=5)"),
           ("sampling", SamplingConfig, "SamplingConfig(temperature=0.0)"),
           ("reselect", ReselectConfig, "ReselectConfig(enabled=True)"))
"""DecodeConfig's nested settings: (field, class, example shown in the error)."""
CPU_MAX_NEW_TOKENS = 128
"""New tokens of a CPU run: the CPU presets' budget, and a model's without one (``preset_defaults(cuda=False)``)."""


@dataclass(frozen=True)
class DecodeConfig:
    """One decoding request's settings.

    Attributes:
        method: ``vanilla`` or a pruning method (speculative decoding; it overrides ``prune.method``).
        max_new_tokens: generation budget in tokens (1..4096).
        prune, tree: the draft's video-token pruning and tree shape.
        stop_at_eos: stop at the first EOS (False = fixed-length generation).
        sampling: temperature / nucleus / seed; temperature 0 = greedy.
        reselect: re-selection of the draft's video tokens during decoding (:class:`ReselectConfig`).

    Raises:
        ConfigError: unknown method, out-of-range value or a nested setting of the wrong class.
    """

    method: str = "specvlm"
    max_new_tokens: int = 256
    prune: PruneConfig = field(default_factory=PruneConfig)
    tree: TreeConfig = field(default_factory=TreeConfig)
    stop_at_eos: bool = True
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    reselect: ReselectConfig = field(default_factory=ReselectConfig)

    def __post_init__(self) -> None:
        if self.method not in DECODE_METHODS:
            raise ConfigError(f"method {self.method!r} is unknown: use one of {', '.join(DECODE_METHODS)}.")
        _check_range("max_new_tokens", int(self.max_new_tokens), 1, 4096)
        for name, cls, example in _NESTED:
            value = getattr(self, name)
            if not isinstance(value, cls):
                hint = (f" (to choose the pruning method, use DecodeConfig(method={value!r}))"
                        if name == "prune" and isinstance(value, str) else "")
                raise ConfigError(f"{name}={value!r} is not a {cls.__name__}: pass {name}={example}{hint}.")
        if self.speculative and self.prune.method != self.method:
            object.__setattr__(self, "prune", replace(self.prune, method=self.method))

    @property
    def speculative(self) -> bool:
        """True for every method except ``vanilla``."""
        return self.method != "vanilla"


def vanilla_config(config: DecodeConfig) -> DecodeConfig:
    """The plain decoding a speculative run is compared against: ``config``'s budget, EOS rule and sampling,
    without re-selection.

    Source: docs/design.md §4.13 (the honest baseline).
    """
    return replace(config, method="vanilla", reselect=ReselectConfig())


@dataclass(frozen=True)
class VideoConfig:
    """Frame sampling.

    Attributes:
        num_frames: frames sampled uniformly over the clip (1..1024); ignored when fps is set
            (fps takes precedence, so ``VideoConfig(num_frames=4, fps=2.0)`` samples at 2 fps).
        fps: sample at this rate instead (frames per second, > 0), capped by max_frames.
        max_frames: hard cap on sampled frames (memory bound).
        max_pixels: frames larger than this (H*W) are downscaled while decoding (:func:`specvlm.video.load_video`).
        even_frames: round the count down to an even number (Qwen2.5-VL temporal patch 2).

    Raises:
        ConfigError: out-of-range value.
    """

    num_frames: int = 16
    fps: float | None = None
    max_frames: int = 256
    max_pixels: int = 448 * 448
    even_frames: bool = False

    def __post_init__(self) -> None:
        _check_range("num_frames", int(self.num_frames), 1, 1024)
        _check_range("max_frames", int(self.max_frames), 1, 4096)
        if self.fps is not None:
            _check_range("fps", float(self.fps), 1e-3, 240.0)


def tree_with_options(base: TreeConfig | None = None, *, shape: str | None = None, depth: int | None = None,
                      top_k: int | None = None, total_tokens: int | None = None,
                      min_prob: float | None = None) -> TreeConfig:
    """A preset's draft tree with the tree options a person set (the CLI's flags, the app's widgets).

    Rules: an option that is None or equal to ``base``'s value changes nothing, so ``base`` stays whole
    (with its long-prompt tree, :attr:`TreeConfig.long_prompt`); a ``shape`` other than ``base``'s starts
    from that shape's defaults, not the preset's tuning; once an option changes the tree, the result
    applies to every prompt length (the long-prompt tree is dropped).

    Args:
        base: the preset's tree (:attr:`specvlm.models.presets.Preset.tree`); None = ``TreeConfig()``.
        shape, depth, top_k, total_tokens, min_prob: the options (:class:`TreeConfig`); None = not set.

    Raises:
        ConfigError: an out-of-range option.
    """
    base = base if base is not None else TreeConfig()
    given = {k: v for k, v in dict(shape=shape, depth=depth, top_k=top_k, total_tokens=total_tokens,
                                   min_prob=min_prob).items() if v is not None}
    if given.get("shape", base.shape) != base.shape:
        base = TreeConfig(shape=given["shape"])
    plain = base.without_long_prompt()
    tree = replace(plain, **given)
    return base if tree == plain else tree


def config_from_settings(method: str = "specvlm", *, max_new_tokens: int | None = None, stop_at_eos: bool = True,
                         drop_rate: float = PruneConfig.drop_rate, top_p: float = PruneConfig.top_p,
                         seed: int = SamplingConfig.seed, temperature: float = SamplingConfig.temperature,
                         top_p_sampling: float = SamplingConfig.top_p_sampling, tree: TreeConfig | None = None,
                         shape: str | None = None, depth: int | None = None, top_k: int | None = None,
                         total_tokens: int | None = None, min_prob: float | None = None,
                         adaptive_r: bool = False, reselect: ReselectConfig | None = None) -> DecodeConfig:
    """One :class:`DecodeConfig` from flat settings: the one path of the CLI and the app.

    Args:
        method: ``vanilla`` or a pruning method.
        max_new_tokens, stop_at_eos: the budget (tokens; None = ``DecodeConfig.max_new_tokens``) and whether
            EOS ends the generation.
        drop_rate, top_p: r and λ of the pruning.
        seed: the request's seed, for sampling and for ``random`` pruning alike.
        temperature, top_p_sampling: sampling (temperature 0 = greedy).
        tree: the preset's tree (None = ``TreeConfig()``); shape, depth, top_k, total_tokens, min_prob:
            the tree options, combined with it by :func:`tree_with_options`.
        adaptive_r: choose r per clip (:attr:`PruneConfig.adaptive_r`; ``drop_rate`` is then unused).
        reselect: re-selection settings (None = off).

    Raises:
        ConfigError: an unknown method, or an out-of-range value (the message names the setting).
    """
    return DecodeConfig(
        method=method, max_new_tokens=DecodeConfig.max_new_tokens if max_new_tokens is None else max_new_tokens,
        stop_at_eos=stop_at_eos, prune=PruneConfig(drop_rate=drop_rate, top_p=top_p, seed=seed, adaptive_r=adaptive_r),
        tree=tree_with_options(tree, shape=shape, depth=depth, top_k=top_k, total_tokens=total_tokens,
                               min_prob=min_prob),
        sampling=SamplingConfig(temperature=temperature, top_p_sampling=top_p_sampling, seed=seed),
        reselect=reselect or ReselectConfig())
