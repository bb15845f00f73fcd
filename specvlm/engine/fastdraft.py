"""A draft runner with few, fused ops over a static KV buffer.

The draft's numerics never change the output (the target verifies every drafted token,
docs/design.md §4.9), so the draft may take any fast path. On a CPU a small draft's step is
mostly per-op fixed cost: Python and ATen dispatch through transformers' module stack (a
per-op dispatch of every linear and norm, plus mask building and cache bookkeeping).
:class:`FastDraftRunner` runs the same decoder layers with the module's own weights, read once
per model through public module attributes (:func:`draft_weights`). A small draft gets folded
copies laid out as right-hand matmul operands: q/k/v and gate/up fused into one matrix each, each
RMS-norm weight multiplied into the matmul after it, the attention scale into the query rows (a
one-row product with a contiguous (in, out) matrix is cheaper on a CPU than ``F.linear``'s transposed read). RoPE comes from a position table built once per model with the
model's own rotary module (:func:`rope_table`), grouped-query attention is folded onto the KV heads (a single query,
the chain's case, is two small batched matmuls and a softmax; several go through SDPA with the
tree mask), and keys/values are written in place into a preallocated buffer (rollback moves one
integer). It has :class:`specvlm.engine.draft.DraftRunner`'s interface (``feed_pending``,
``feed_nodes``, ``feed_next``, ``rollback``) and returns the same log-probs up to float rounding.
Its cost per chain node against the module stack: docs/benchmark.md.

Supported: pre-norm decoder layers with ``self_attn.{q,k,v,o}_proj`` linears, no per-head q/k
norms, a gated SiLU MLP (``mlp.{gate,up,down}_proj``), RMS norms with a plain ``weight``,
full attention in every layer, a ``rotary_emb`` whose cos/sin depend only on the position
(Qwen2 / Qwen2.5-VL / LLaVA-OneVision's Qwen2 / Llama-style text stacks), all on one device. Anything else falls
back to ``DraftRunner`` (:func:`make_draft_runner`).

Source: docs/design.md §4.8 (draft tree feeds, positions = root + depth) and §7 (per-forward
fixed cost on a CPU); grouped-query attention (Ainslie et al. 2023); RoPE (Su et al. 2021).
"""
from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from specvlm.engine import kv
from specvlm.spec.tree import feed_mask

FUSE_LIMIT_BYTES = 256 * 2**20
"""Fuse q/k/v and gate/up weights into one matrix only when the fused copies stay under this
(bytes); larger drafts keep separate matmuls on the model's own tensors (no second copy)."""
GROW = 512
"""Extra token slots allocated whenever the KV buffer or the position table grows."""


class FastDraftUnsupported(ValueError):
    """The draft's layers are not the plain pre-norm decoder this runner implements."""


@dataclass(frozen=True)
class _Layer:
    """One decoder layer's weights as right-hand matmul operands (in, out).

    Small drafts get folded copies: the RMS-norm weight multiplied into the matmul after it and
    the attention scale into the query rows (``ln1``/``ln2`` are then None). Larger drafts keep
    the module's own tensors (transposed views, no copy) and apply norm and scale separately.
    """

    ln1: torch.Tensor | None
    ln2: torch.Tensor | None
    qkv: tuple[tuple[torch.Tensor, torch.Tensor | None], ...]   # one fused (w_t, b) or three
    o: tuple[torch.Tensor, torch.Tensor | None]
    gate_up: tuple[torch.Tensor, ...]                           # one fused w_t or (gate_t, up_t)
    down: torch.Tensor


@dataclass(frozen=True)
class _Dims:
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    eps_sum: float   # the norms' eps times the hidden size (see _rms)
    scale: float
    q_scale: float   # multiplier still to apply to the queries (1.0 when folded into the weights)


def _linear(mod: Any, name: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    lin = getattr(mod, name, None)
    if not isinstance(lin, torch.nn.Linear):
        raise FastDraftUnsupported(f"the draft layer has no linear {name!r}: use DraftRunner.")
    return lin.weight, lin.bias


def _norm_weight(norm: Any) -> torch.Tensor:
    w = getattr(norm, "weight", None)
    if w is None or getattr(norm, "variance_epsilon", None) is None:
        raise FastDraftUnsupported("the draft's norm is not an RMS norm with a weight: use DraftRunner.")
    # what the norm computes, checked in float32 on a copy: in bf16 or fp16 the module's own rounding (float32
    # inside, cast back) differs from F.rms_norm's by more than any tolerance that still tells norms apart
    probe = copy.deepcopy(norm).to(torch.float32)
    x = torch.randn(1, w.shape[0], generator=torch.Generator().manual_seed(0)).to(device=w.device)
    want = F.rms_norm(x, (w.shape[0],), w.to(torch.float32), norm.variance_epsilon)
    if not torch.allclose(probe(x), want, rtol=1e-3, atol=1e-4):
        raise FastDraftUnsupported("the draft's norm is not weight * x / rms(x): use DraftRunner.")
    return w


def read_layers(lm: Any, fuse_limit: int = FUSE_LIMIT_BYTES) -> tuple[list[_Layer], _Dims]:
    """Read the decoder layers' weights through public module attributes.

    Args:
        lm: the text decoder stack (``layers``, ``norm``, ``rotary_emb``, ``config``).
        fuse_limit: bytes up to which the layers get folded, fused copies (see :class:`_Layer`).

    Returns:
        (per-layer weights, dimensions).

    Raises:
        FastDraftUnsupported: a layer is not the supported pre-norm attention + gated-SiLU decoder.
    """
    cfg = lm.config
    kinds = set(getattr(cfg, "layer_types", None) or ["full_attention"])
    if kinds != {"full_attention"} or getattr(cfg, "hidden_act", "silu") != "silu":
        raise FastDraftUnsupported("the draft uses sliding-window layers or a non-SiLU MLP: use DraftRunner.")
    if not hasattr(lm, "rotary_emb") or not hasattr(lm, "norm") or not hasattr(lm, "layers"):
        raise FastDraftUnsupported("the draft's text model has no rotary_emb / norm / layers: use DraftRunner.")
    with torch.no_grad():
        return _read_layers(lm, cfg, fuse_limit)


def _read_layers(lm: Any, cfg: Any, fuse_limit: int) -> tuple[list[_Layer], _Dims]:
    params = sum(p.numel() * p.element_size() for p in lm.layers.parameters())
    fold = params <= fuse_limit
    att0 = lm.layers[0].self_attn
    head_dim = int(getattr(att0, "head_dim", cfg.hidden_size // cfg.num_attention_heads))
    scale = float(getattr(att0, "scaling", head_dim ** -0.5))
    out = []
    for layer in lm.layers:
        att, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if att is None or mlp is None or any(hasattr(att, a) for a in ("q_norm", "k_norm")):
            raise FastDraftUnsupported("the draft layer has per-head q/k norms or no self_attn/mlp: use DraftRunner.")
        q, k, v = (_linear(att, n) for n in ("q_proj", "k_proj", "v_proj"))
        gate, up, down = (_linear(mlp, n) for n in ("gate_proj", "up_proj", "down_proj"))
        if gate[1] is not None or up[1] is not None or down[1] is not None:
            raise FastDraftUnsupported("the draft's MLP has biases: use DraftRunner.")
        root_d = float(cfg.hidden_size) ** 0.5   # _rms divides by sqrt(sum x^2): the weights carry sqrt(D)
        ln1 = _norm_weight(layer.input_layernorm) * root_d
        ln2 = _norm_weight(layer.post_attention_layernorm) * root_d
        o_w, o_b = _linear(att, "o_proj")
        if fold:   # x/rms(x) @ (diag(ln) W^T): the norm weight and the query scale live in the copy
            w = torch.cat([q[0] * scale, k[0], v[0]])
            bias = None if q[1] is None else torch.cat([q[1] * scale, k[1], v[1]])
            qkv = (((w * ln1).t().contiguous(), bias),)
            gate_up = ((torch.cat([gate[0], up[0]]) * ln2).t().contiguous(),)
            out.append(_Layer(None, None, qkv, (o_w.t().contiguous(), o_b), gate_up, down[0].t().contiguous()))
        else:
            qkv = tuple((w.t(), b) for w, b in (q, k, v))
            out.append(_Layer(ln1, ln2, qkv, (o_w.t(), o_b), (gate[0].t(), up[0].t()), down[0].t()))
    dims = _Dims(int(cfg.num_attention_heads), int(cfg.num_key_value_heads), head_dim,
                 int(lm.layers[0].mlp.down_proj.in_features), float(lm.norm.variance_epsilon) * cfg.hidden_size,
                 scale, 1.0 if fold else scale)
    return out, dims


def _rms(x: torch.Tensor, weight: torch.Tensor | None, eps_sum: float) -> torch.Tensor:
    """RMS norm as x / sqrt(sum(x^2) + D * eps), times ``weight`` (which carries the sqrt(D)).

    ``weight`` is None when it was folded into the next matmul (:func:`read_layers`).
    """
    h = x * torch.rsqrt(torch.sum(x * x, -1, keepdim=True).add_(eps_sum))
    return h if weight is None else h.mul_(weight)


def _matmul(h: torch.Tensor, w_t: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    return torch.mm(h, w_t) if b is None else torch.addmm(b, h, w_t)


@dataclass(frozen=True)
class _Weights:
    layers: list[_Layer]
    dims: _Dims
    head: tuple[torch.Tensor, torch.Tensor | None]   # (D, vocab) right operand and bias
    final_norm: torch.Tensor | None                  # None when folded into ``head``
    source: tuple[int, ...]                          # data pointers of the tensors read


_WEIGHTS: "weakref.WeakKeyDictionary[Any, dict[tuple[int, int], _Weights]]" = weakref.WeakKeyDictionary()


def draft_weights(model: Any, lm: Any, vocab: int) -> tuple[list[_Layer], _Dims, tuple, torch.Tensor | None]:
    """The draft's layer weights as :class:`FastDraftRunner` uses them, read once per model.

    Folded copies (:func:`read_layers`) are kept with the model (weakly) and reused by every
    request; they are read again when a parameter tensor is replaced (e.g. another checkpoint
    loaded into the module). Stale weights could only make drafts worse, never the output wrong:
    the target verifies every drafted token.

    Args:
        model: the draft ``...ForConditionalGeneration``; lm: its text decoder stack;
        vocab: rows of the LM head to keep (the pair's shared vocabulary).

    Returns:
        (layers, dims, (head right operand (D, vocab), bias or None), final norm weight or None).

    Raises:
        FastDraftUnsupported: as :func:`read_layers`.
    """
    head = model.get_output_embeddings()
    tensors = list(lm.parameters()) + [head.weight]
    source = tuple(t.data_ptr() for t in tensors)
    key = (FUSE_LIMIT_BYTES, vocab)
    held = _WEIGHTS.get(model, {}).get(key)
    if held is None or held.source != source:
        layers, dims = read_layers(lm, FUSE_LIMIT_BYTES)
        norm = _norm_weight(lm.norm) * float(lm.config.hidden_size) ** 0.5
        w, b = head.weight[:vocab], None if getattr(head, "bias", None) is None else head.bias[:vocab]
        with torch.no_grad():
            folded = layers[0].ln1 is None
            head_op = ((w * norm).t().contiguous() if folded else w.t(), b)
        held = _Weights(layers, dims, head_op, None if folded else norm, source)
        _WEIGHTS.setdefault(model, {})[key] = held
    return held.layers, held.dims, held.head, held.final_norm


_ROPE: "weakref.WeakKeyDictionary[Any, dict[int, tuple[torch.Tensor, torch.Tensor]]]" = weakref.WeakKeyDictionary()


def rope_table(model: Any, lm: Any, adapter: Any, rope_dims: int, need: int) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE cos and sign-folded sin for 1-D positions 0..P-1 (P >= ``need``), kept with the model.

    Built with the model's own rotary module (every M-RoPE row at the same position, as for text
    tokens and tree nodes) and grown by at least :data:`GROW` rows when a longer position is asked
    for, so requests share it instead of rebuilding it.

    Args:
        model: the draft model (the cache key); lm: its text decoder stack; adapter: its family
        adapter (``lm_positions``); rope_dims: R, rows of the position ids; need: positions needed.

    Returns:
        (cos, sin) float (P, head_dim) in the model's dtype; ``sin`` has its first half negated, so
        rotate_half(x) * sin = flip(x halves) * sin.
    """
    tables = _ROPE.setdefault(model, {})
    held = tables.get(rope_dims)
    if held is not None and held[0].shape[0] >= need:
        return held
    emb = model.get_input_embeddings().weight
    n = max(need + GROW, 2 * held[0].shape[0] if held is not None else 0)
    with torch.no_grad():
        rows = torch.arange(n, device=emb.device).expand(rope_dims, n)
        cos, sin = lm.rotary_emb(emb[:1][None], adapter.lm_positions(rows))
        cos, sin = cos.reshape(n, -1), sin.reshape(n, -1)
        h = sin.shape[-1] // 2
        tables[rope_dims] = (cos, torch.cat([-sin[:, :h], sin[:, h:]], -1))
    return tables[rope_dims]


class FastDraftRunner:
    """Drop-in :class:`specvlm.engine.draft.DraftRunner` with fused eager ops over a static KV buffer.

    Args:
        pair: the model pair (``pair.draft``, ``pair.draft_adapter``, ``pair.shared_vocab``).
        cache: the draft's cache after draft prefill (P tokens; copied into the runner's buffer).
        rope_dims: R, rows of the position ids.
        pos_offset: draft position - target position for the same token.

    Raises:
        FastDraftUnsupported: the draft's architecture is not supported, or its weights are spread over
            several devices (a ``device_map`` over GPUs): every fused op runs on one device, so use
            DraftRunner, whose modules move activations between the layers' devices.
    """

    def __init__(self, pair: Any, cache: Any, rope_dims: int, pos_offset: int = 0):
        model, ad = pair.draft, pair.draft_adapter
        self.lm, self.ad, self.R, self.offset = ad.language_model(model), ad, rope_dims, int(pos_offset)
        devices = {t.device for t in self.lm.parameters()} | {model.get_output_embeddings().weight.device,
                                                               model.get_input_embeddings().weight.device}
        if len(devices) > 1:
            raise FastDraftUnsupported(f"the draft's weights are spread over {len(devices)} devices "
                                       f"({', '.join(sorted(str(d) for d in devices))}).")
        self.vocab = int(pair.shared_vocab)
        self.layers, self.dims, self.head, self.final_norm = draft_weights(model, self.lm, self.vocab)
        self.model, self.embed = model, model.get_input_embeddings().weight
        self.dtype, self.device = self.embed.dtype, self.embed.device
        self.length = kv.cache_length(cache)
        self.k, self.v = self._copy_cache(cache, self.length + GROW)
        self.cos, self.sin = rope_table(model, self.lm, ad, rope_dims, 0)
        self.base, self.root_pos = self.length, 0
        self.slot: dict[int, int] = {}
        self.chain: list[int] = []   # tokens fed by feed_next since the last feed_pending, in slot order

    # ------------------------------------------------------------------ buffers
    def _copy_cache(self, cache: Any, cap: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per layer (KV, cap, d) key and value buffers holding the prefill's tokens."""
        ks, vs = [], []
        for layer in cache.layers:
            k, v = layer.keys[0], layer.values[0]      # (KV, P, d)
            kb = k.new_empty(k.shape[0], cap, k.shape[-1])
            vb = v.new_empty(v.shape[0], cap, v.shape[-1])
            kb[:, : self.length] = k[:, : self.length]
            vb[:, : self.length] = v[:, : self.length]
            ks.append(kb)
            vs.append(vb)
        return ks, vs

    def _reserve(self, need: int) -> None:
        cap = self.k[0].shape[1]
        if need <= cap:
            return
        new = max(need + GROW, 2 * cap)
        for bufs in (self.k, self.v):
            for i, b in enumerate(bufs):
                nb = b.new_empty(b.shape[0], new, b.shape[2])
                nb[:, : self.length] = b[:, : self.length]
                bufs[i] = nb

    def _rope(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sign-folded sin (n, d) for 1-D positions ``pos`` (n,) (:func:`rope_table`)."""
        top = int(pos.max()) + 1
        if top > self.cos.shape[0]:
            self.cos, self.sin = rope_table(self.model, self.lm, self.ad, self.R, top)
        return self.cos[pos], self.sin[pos]

    # ------------------------------------------------------------------ forward
    def _attend(self, i: int, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor | None) -> torch.Tensor:
        """One layer's attention block on x (n, D); writes the n new keys/values at [length, length + n)."""
        d, lw = self.dims, self.layers[i]
        n, H, KV, hd = x.shape[0], d.heads, d.kv_heads, d.head_dim
        h = _rms(x, lw.ln1, d.eps_sum)
        qkv = torch.cat([_matmul(h, w, b) for w, b in lw.qkv], -1) if len(lw.qkv) > 1 else _matmul(h, *lw.qkv[0])
        qk = qkv[:, : (H + KV) * hd].view(n, H + KV, hd)
        qk = torch.addcmul(qk * cos[:, None], qk.view(n, H + KV, 2, hd // 2).flip(2).view(n, H + KV, hd), sin[:, None])
        end = self.length + n
        self.k[i][:, self.length:end] = qk[:, H:].transpose(0, 1)
        self.v[i][:, self.length:end] = qkv[:, (H + KV) * hd:].view(n, KV, hd).transpose(0, 1)
        g = H // KV
        keys, values = self.k[i][:, :end], self.v[i][:, :end]
        if n == 1 and mask is None:   # one query (a chain node, a lone root): heads grouped per KV head
            q = qk[0, :H].view(KV, g, hd)
            q = q if d.q_scale == 1.0 else q * d.q_scale
            att = torch.softmax(torch.bmm(q, keys.transpose(1, 2)), -1)
            o = torch.bmm(att, values).view(1, H * hd)
        else:
            q = qk[:, :H].reshape(n, KV, g, hd).permute(1, 2, 0, 3).reshape(1, KV, g * n, hd)
            o = F.scaled_dot_product_attention(q, keys[None], values[None], attn_mask=mask, scale=d.q_scale)
            o = o.view(KV, g, n, hd).permute(2, 0, 1, 3).reshape(n, H * hd)
        w, b = lw.o
        return torch.addmm(x, o, w) if b is None else torch.addmm(x + b, o, w)

    def _mlp(self, i: int, x: torch.Tensor) -> torch.Tensor:
        lw, inter = self.layers[i], self.dims.inter
        h = _rms(x, lw.ln2, self.dims.eps_sum)
        if len(lw.gate_up) == 1:
            gu = torch.mm(h, lw.gate_up[0])
            a = F.silu(gu[:, :inter]).mul_(gu[:, inter:])
        else:
            a = F.silu(torch.mm(h, lw.gate_up[0])).mul_(torch.mm(h, lw.gate_up[1]))
        return torch.addmm(x, a, lw.down)

    def _forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 allowed: torch.Tensor | None) -> torch.Tensor:
        """n new tokens through every layer; returns float32 (n, vocab) log-probs (shared vocab).

        Args:
            x: (n, D) input embeddings; cos, sin: (n, head_dim) RoPE rows (:meth:`_rope`);
            allowed: bool (n, T) visibility of the last T cached-or-new keys, or None = all visible.
        """
        n = x.shape[0]
        self._reserve(self.length + n)
        mask = None
        if allowed is not None:
            end, g = self.length + n, self.dims.heads // self.dims.kv_heads
            m = torch.zeros(n, end, dtype=self.dtype, device=self.device)
            m[:, end - allowed.shape[1]:].masked_fill_(~allowed.to(self.device), torch.finfo(self.dtype).min)
            mask = m[None].expand(g, n, end).reshape(1, 1, g * n, end)
        for i in range(len(self.layers)):
            x = self._mlp(i, self._attend(i, x, cos, sin, mask))
        self.length += n
        logits = _matmul(_rms(x, self.final_norm, self.dims.eps_sum), *self.head)
        return torch.log_softmax(logits.float(), -1)

    def _feed(self, tokens: torch.Tensor, pos: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        """:meth:`_forward` on int64 (n,) token ids at int64 (n,) 1-D positions."""
        x = F.embedding(tokens.to(self.device), self.embed)
        return self._forward(x, *self._rope(pos.to(self.device)), allowed)

    # ------------------------------------------------------------------ DraftRunner interface
    def feed_pending(self, tokens: list[int], root_pos: int) -> torch.Tensor:
        """Feed tokens not yet in the draft cache, ending with the root at target position ``root_pos``.

        Returns:
            float32 (vocab,) draft log-probs after the root.
        """
        n = len(tokens)
        root_pos = root_pos + self.offset
        # accepted chain nodes are still in the buffer right after the old root, at these same
        # positions and seeing the same tokens: keep them instead of feeding them again
        kept = 0
        if root_pos - n == self.root_pos and self.length == self.base:
            while kept < min(n - 1, len(self.chain)) and tokens[kept] == self.chain[kept]:
                kept += 1
        self.length += kept
        tokens, n = tokens[kept:], n - kept
        pos = torch.arange(root_pos - n + 1, root_pos + 1)
        causal = torch.ones(n, n, dtype=torch.bool).tril_() if n > 1 else None
        logp = self._feed(torch.as_tensor(tokens, dtype=torch.long), pos, causal)
        self.base, self.root_pos, self.slot, self.chain = self.length, root_pos, {}, []
        return logp[-1]

    def feed_nodes(self, nodes: list[int], tree: Any) -> torch.Tensor:
        """Feed tree nodes whose ancestors are already fed; returns float32 (F, vocab) log-probs.

        Args:
            nodes: F node indices of ``tree`` (a :class:`specvlm.spec.tree.DraftTree`).
        """
        n_fed = len(self.slot)
        self.chain = []   # the tree's slots are not a chain any more
        allowed = feed_mask(tree.parents, nodes, {n: s - self.base for n, s in self.slot.items()})
        idx = torch.as_tensor(nodes, dtype=torch.long)
        logp = self._feed(tree.tokens[idx], self.root_pos + tree.depths[idx],
                          None if bool(allowed.all()) else allowed)
        for r, node in enumerate(nodes):
            self.slot[node] = self.base + n_fed + r
        return logp

    def feed_next(self, token: int, depth: int) -> torch.Tensor:
        """Feed one chain node: a child of the last fed node (of the root when none), at ``depth``.

        The node sees every cached token, so it runs with no mask and one query: the cheapest
        draft forward (a greedy chain's only one, :meth:`specvlm.spec.drafters.GreedyDrafter.chain`).

        Args:
            token: the node's token id (< the draft's vocabulary); depth: 1 for a child of the root.

        Returns:
            float32 (vocab,) draft log-probs after the node.
        """
        p = self.root_pos + depth
        if depth == len(self.chain) + 1 and self.length == self.base + len(self.chain) and not self.slot:
            self.chain.append(int(token))   # its keys/values land in slot base + depth - 1
        else:
            self.chain = []
        if p >= self.cos.shape[0]:
            self._rope(torch.tensor([p]))
        x = self.embed[token:token + 1]
        return self._forward(x, self.cos[p:p + 1], self.sin[p:p + 1], None)[0]

    def rollback(self) -> None:
        """Drop every tree node (back to after the pending tokens): the buffer keeps its contents, so
        chain nodes that the target accepts are reused by the next :meth:`feed_pending`."""
        self.length, self.slot = self.base, {}
