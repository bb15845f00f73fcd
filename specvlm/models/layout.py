"""The text decoder's linear weights laid out in memory as right-hand matmul operands, on a CPU.

``F.linear(x, W)`` computes ``x @ W.T`` for a weight W of shape (out, in). Stored row-major (the
checkpoint's layout), W.T is a transposed read, and on a CPU the BLAS kernels for a few rows (a
verify of k tokens, a draft level of k siblings) are then slower than they need to be: a (1408, 512)
projection over 7 rows took about 2.5x its 1-row time in that layout on a 2-core AVX2 EPYC and about 1.2x
once W.T was contiguous; on a 2-core Xeon a 7-token verify of the bundled large target fell from 1.81-1.89
to 1.67-1.72 decode steps (docs/benchmark.md; ``python -m scripts.roofline`` reports verify(k)/decode). :func:`use_right_operand_layout` stores each decoder linear's weight as the
transpose of a contiguous (in, out) tensor: the parameter keeps its shape (out, in) and its values,
every consumer (the module stack, ``model.generate()``, the fused target of
:mod:`specvlm.engine.statictarget`, the draft's weight reader) reads the same tensor, so vanilla
decoding and verification run the same kernels on the same numbers, and nothing is copied twice.

Only float32 CPU weights are laid out; GPU weights and other dtypes are left as loaded (CUDA's GEMMs
handle either layout; CUDA-graph capture makes per-op cost moot there).

Source: docs/design.md §4.13 and §12 (a CPU decode step that reads its weights from memory).
"""
from __future__ import annotations

from typing import Any

import torch


def use_right_operand_layout(lm: Any) -> int:
    """Store the linear weights of ``lm.layers`` as ``W_t.t()`` with ``W_t`` contiguous (in, out), in place.

    Args:
        lm: a text decoder stack with ``layers`` (the language model of a family adapter); embeddings
            and the LM head (often tied to the embeddings) are not touched.

    Returns:
        The number of weights laid out (0 when the weights are not float32 on a CPU, or already laid out).

    Values, shapes, dtypes and devices are unchanged: ``torch.equal`` holds for every weight before
    and after, and so does every module's output for the same kernel choice.
    """
    layers = getattr(lm, "layers", None)
    if layers is None:
        return 0
    done = 0
    with torch.no_grad():
        for mod in layers.modules():
            w = getattr(mod, "weight", None)
            if not isinstance(mod, torch.nn.Linear) or w is None or w.dim() != 2:
                continue
            if w.device.type != "cpu" or w.dtype != torch.float32 or w.t().is_contiguous():
                continue
            w.data = w.data.t().contiguous().t()
            done += 1
    return done
