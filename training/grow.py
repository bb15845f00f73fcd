"""Grow a trained bundled target into a larger one that computes the same function (Net2Net-style).

A target whose decode step reads its weights from memory (not from the CPU's cache) is the regime real video LLMs
decode in, and where speculation pays. Training one from scratch on these CPUs takes days; growing the trained
target first keeps everything it knows, then training (``python -m training.train_bundled --init-target GROWN
--target-size large ...``) spends its steps on what the larger model can learn beyond it.

How the function is kept (text model, ``m`` = width factor, heads and hidden grow together so head_dim and the
M-RoPE sections stay):
- The residual stream becomes ``[x, x, ...]``: the embedding and every producer into the stream (attention
  ``o_proj``, MLP ``down_proj``, the vision merger's last layer) duplicate their output rows. The stream's mean
  square is unchanged, so every RMSNorm (weight duplicated) gives ``[n, n]`` exactly, its epsilon included.
- Every consumer of duplicated inputs (q/k/v, gate/up, ``o_proj`` over duplicated heads, ``down_proj`` over
  duplicated MLP units) splits its input columns ``[W/m + d, W/m - d]``: the sum is exactly ``W``, while the noise
  ``d`` breaks the symmetry between the copies so that training can make them differ.
- Query heads are duplicated as a block (``[h0..hH-1, h0..hH-1]``), key/value heads likewise, so every copied query
  head still reads its own key/value head under grouped-query attention.
- The tied output head reads the duplicated embedding (a sum over ``m`` copies): the final norm's weight is
  scaled by ``1 / m`` so the logits stay the same.
- New layers (text) and blocks (vision) copy their predecessor's weights with a zero output projection and a zero
  MLP down projection: they add nothing to the stream until trained.
- The vision MLP's units are duplicated the same way (its hidden size stays).

Source: Chen, Goodfellow, Shlens, "Net2Net: accelerating learning via knowledge transfer" (ICLR 2016), adapted to
RMSNorm, grouped-query attention and tied embeddings.

Example (from the repository root):
    python -m training.grow --source assets/model_sparse/target --size large --out runs/large/grown
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from training.model import SIZES, ModelSize, build_model


def _split_in(w: torch.Tensor, m: int, noise: float, gen: torch.Generator) -> torch.Tensor:
    """Input columns repeated ``m`` times, each ``w / m`` plus noise that sums to zero across the copies.

    Args:
        w: (out, in) float32.
        m: copies of the input (1 = unchanged).
        noise: noise scale relative to ``w``'s standard deviation.

    Returns:
        (out, m * in): applied to ``[x] * m`` it gives ``w @ x`` up to rounding.
    """
    if m == 1:
        return w.clone()
    parts = [w / m for _ in range(m)]
    if noise > 0:
        scale = noise * float(w.std()) / m
        for i in range(m - 1):
            d = torch.randn(w.shape, generator=gen) * scale
            parts[i] = parts[i] + d
            parts[-1] = parts[-1] - d
    return torch.cat(parts, dim=1)


def _dup_out(w: torch.Tensor, m: int, scale: float = 1.0) -> torch.Tensor:
    """Output rows (dim 0) repeated ``m`` times as a block, times ``scale``: (out, ...) -> (m * out, ...)."""
    return torch.cat([w] * m, dim=0) * scale


def _factor(big: int, small: int, what: str) -> int:
    if big % small:
        raise ValueError(f"{what}: {big} is not a multiple of {small}; grow by whole factors")
    return big // small


def grow_text_layer(src: dict, prefix: str, m: int, mi: int, noise: float, gen: torch.Generator) -> dict:
    """One decoder layer's tensors widened by ``m`` (hidden, heads) and ``mi`` (MLP units).

    Args:
        src: the source state dict.
        prefix: e.g. ``"model.language_model.layers.0."``.

    Returns:
        the widened tensors under the same names.
    """
    g = lambda k: src[prefix + k]   # noqa: E731
    out = {}
    for k in ("input_layernorm.weight", "post_attention_layernorm.weight"):
        out[k] = _dup_out(g(k), m)
    for k in ("q_proj", "k_proj", "v_proj"):
        out[f"self_attn.{k}.weight"] = _dup_out(_split_in(g(f"self_attn.{k}.weight"), m, noise, gen), m)
        out[f"self_attn.{k}.bias"] = _dup_out(g(f"self_attn.{k}.bias"), m)
    out["self_attn.o_proj.weight"] = _dup_out(_split_in(g("self_attn.o_proj.weight"), m, noise, gen), m)
    for k in ("gate_proj", "up_proj"):
        out[f"mlp.{k}.weight"] = _dup_out(_split_in(g(f"mlp.{k}.weight"), m, noise, gen), mi)
    out["mlp.down_proj.weight"] = _dup_out(_split_in(g("mlp.down_proj.weight"), mi, noise, gen), m)
    return {prefix + k: v for k, v in out.items()}


def grow_vision_block(src: dict, prefix: str, mi: int, noise: float, gen: torch.Generator) -> dict:
    """One vision block with its MLP units repeated ``mi`` times (hidden size unchanged)."""
    out = {k: v.clone() for k, v in src.items() if k.startswith(prefix)}
    for k in ("gate_proj", "up_proj"):
        out[f"{prefix}mlp.{k}.weight"] = _dup_out(src[f"{prefix}mlp.{k}.weight"], mi)
        out[f"{prefix}mlp.{k}.bias"] = _dup_out(src[f"{prefix}mlp.{k}.bias"], mi)
    out[f"{prefix}mlp.down_proj.weight"] = _split_in(src[f"{prefix}mlp.down_proj.weight"], mi, noise, gen)
    return out


def _identity_copy(layer: dict, old: str, new: str, zero: tuple[str, ...]) -> dict:
    """``layer``'s tensors renamed from ``old`` to ``new`` prefix, with the ``zero`` ones (output projections)
    zeroed: a residual block that adds nothing to the stream."""
    out = {}
    for k, v in layer.items():
        name = new + k[len(old):]
        out[name] = torch.zeros_like(v) if any(k.endswith(z) for z in zero) else v.clone()
    return out


def grown_layer_order(src_layers: int, dst_layers: int) -> list[int | None]:
    """Which source layer each destination layer copies (``None`` = an identity layer), new layers interleaved.

    Example: 4 -> 8 gives ``[0, None, 1, None, 2, None, 3, None]``.

    Raises:
        ValueError: ``dst_layers`` is smaller than ``src_layers``.
    """
    if dst_layers < src_layers:
        raise ValueError(f"cannot grow {src_layers} layers into {dst_layers}")
    order: list[int | None] = []
    extra = dst_layers - src_layers
    for i in range(src_layers):
        order.append(i)
        n_new = extra // src_layers + (1 if i < extra % src_layers else 0)
        order.extend([None] * n_new)
    return order


def grow_state(src: dict, src_size: ModelSize, dst_size: ModelSize, noise: float = 0.0, seed: int = 0) -> dict:
    """The state dict of a ``dst_size`` model that computes what ``src`` (a ``src_size`` model) computes.

    Args:
        src: state dict of a bundled Qwen2_5_VLForConditionalGeneration (float32).
        noise: symmetry-breaking noise, relative to each weight's standard deviation; the function is kept exactly
            for any noise (up to float rounding) as long as no training has happened.

    Returns:
        the grown state dict (float32).

    Raises:
        ValueError: sizes that do not grow by whole factors, a changed head_dim or vision hidden size, or fewer
            layers.
    """
    m = _factor(dst_size.hidden, src_size.hidden, "hidden")
    if dst_size.heads != m * src_size.heads or dst_size.kv_heads != m * src_size.kv_heads:
        raise ValueError("heads and kv_heads must grow with hidden (head_dim and M-RoPE sections stay)")
    if dst_size.v_hidden != src_size.v_hidden or dst_size.v_heads != src_size.v_heads:
        raise ValueError("the vision tower's hidden size and heads stay; grow its depth and MLP")
    mi = _factor(dst_size.intermediate, src_size.intermediate, "intermediate")
    vmi = _factor(dst_size.v_intermediate, src_size.v_intermediate, "v_intermediate")
    gen = torch.Generator().manual_seed(seed)
    lm = "model.language_model."
    out = {lm + "embed_tokens.weight": torch.cat([src[lm + "embed_tokens.weight"]] * m, dim=1),
           lm + "norm.weight": _dup_out(src[lm + "norm.weight"], m, 1.0 / m)}
    out["lm_head.weight"] = out[lm + "embed_tokens.weight"]   # tied
    last = None
    for j, i in enumerate(grown_layer_order(src_size.layers, dst_size.layers)):
        if i is not None:
            last = grow_text_layer(src, f"{lm}layers.{i}.", m, mi, noise, gen)
            out.update({k.replace(f"layers.{i}.", f"layers.{j}.", 1): v for k, v in last.items()})
        else:
            old = next(iter(last)).split("layers.")[1].split(".")[0]
            out.update(_identity_copy(last, f"{lm}layers.{old}.", f"{lm}layers.{j}.",
                                      ("o_proj.weight", "down_proj.weight")))
    vis = "model.visual."
    for k, v in src.items():
        if k.startswith(vis) and ".blocks." not in k:
            out[k] = v.clone()
    out[vis + "merger.mlp.2.weight"] = _dup_out(src[vis + "merger.mlp.2.weight"], m)
    out[vis + "merger.mlp.2.bias"] = _dup_out(src[vis + "merger.mlp.2.bias"], m)
    block = None
    for j in range(dst_size.v_depth):
        if j < src_size.v_depth:
            block = grow_vision_block(src, f"{vis}blocks.{j}.", vmi, noise, gen)
            out.update({k.replace(f"blocks.{j}.", f"blocks.{j}.", 1): v for k, v in block.items()})
            src_j = j
        else:
            out.update(_identity_copy(block, f"{vis}blocks.{src_j}.", f"{vis}blocks.{j}.",
                                      ("attn.proj.weight", "attn.proj.bias", "down_proj.weight", "down_proj.bias")))
    return out


def grow_model(source: Path, size: ModelSize, noise: float, seed: int):
    """Load the target at ``source`` and return (grown model, processor, source size).

    Raises:
        FileNotFoundError: no model at ``source``.
    """
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    if not (source / "config.json").exists():
        raise FileNotFoundError(f"--source {source}: no model there (config.json missing)")
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(source), dtype=torch.float32)
    processor = AutoProcessor.from_pretrained(str(source))
    src_size = size_of(model.config)
    big = build_model(processor.tokenizer, size, seed)
    big.load_state_dict(grow_state(model.state_dict(), src_size, size, noise, seed))
    return big, processor, src_size


def size_of(config) -> ModelSize:
    """The :class:`ModelSize` of a Qwen2.5-VL config."""
    t, v = config.text_config, config.vision_config
    return ModelSize(hidden=t.hidden_size, layers=t.num_hidden_layers, heads=t.num_attention_heads,
                     kv_heads=t.num_key_value_heads, intermediate=t.intermediate_size, v_hidden=v.hidden_size,
                     v_depth=v.depth, v_heads=v.num_heads, v_intermediate=v.intermediate_size)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", required=True, help="a trained bundled target folder (save_pretrained)")
    ap.add_argument("--size", choices=sorted(SIZES), default="large", help="the grown sizes (training/model.py)")
    ap.add_argument("--out", required=True, help="folder for the grown target (weights, processor, info)")
    ap.add_argument("--noise", type=float, default=0.02,
                    help="symmetry-breaking noise relative to each weight's std (the function is kept for any value)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    from training.checkpoints import save_final

    big, processor, src_size = grow_model(Path(args.source), SIZES[args.size], args.noise, args.seed)
    info = {"phase": "target", "grown_from": {"path": args.source, "size": src_size.__dict__},
            "size": SIZES[args.size].__dict__, "noise": args.noise,
            "command": "python -m training.grow " + " ".join(argv if argv is not None else __import__("sys").argv[1:])}
    src_info = Path(args.source) / "training_info.json"
    if src_info.exists():
        info["grown_from"]["training_info"] = json.loads(src_info.read_text())
    save_final(big, processor, Path(args.out), [], "grown target (no training)", info)
    n = sum(p.numel() for p in big.parameters())
    print(f"grown {args.source} ({src_size.hidden}x{src_size.layers}) -> {args.out}: {n / 1e6:.2f}M params")


if __name__ == "__main__":
    main()
