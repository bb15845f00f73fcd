"""Training objectives: weighted LM loss, vision probes, focus and routing attention losses, distillation.

The focus and routing losses read the text-to-video attention through a registered attention
function (:data:`FOCUS_IMPL`) that records the rows named in :data:`FOCUS` during a forward.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from training.data import IGNORE, after_video, model_inputs
from training.token_labels import AUX_HEADS

def weighted_lm_loss(logits: torch.Tensor, labels: torch.Tensor, weighted_ids: list[int],
                     weight: float, fact_mask: torch.Tensor | None = None, fact_weight: float = 1.0) -> torch.Tensor:
    """Next-token cross-entropy with tokens in ``weighted_ids`` counted ``weight`` times.

    logits float (B, L, vocab); labels int64 (B, L) with IGNORE. Label positions set in ``fact_mask``
    (bool (B, L), :func:`training.data.fact_mask`: a subtitle fact's words in the answers) count
    ``fact_weight`` times (the larger weight wins). Equals the model's own loss when both weights are 1.
    """
    tgt = labels[:, 1:]
    mask = tgt != IGNORE
    ce = F.cross_entropy(logits[:, :-1][mask].float(), tgt[mask], reduction="none")
    w = torch.ones_like(ce)
    if weighted_ids and weight != 1.0:
        w = torch.where(torch.isin(tgt[mask], torch.tensor(weighted_ids)), weight, 1.0)
    if fact_mask is not None and fact_weight != 1.0:
        w = torch.where(fact_mask[:, 1:][mask], torch.clamp(w, min=fact_weight), w)
    return (ce * w).sum() / w.sum()


class VisionProbe(torch.nn.Module):
    """Linear probes on the video features (training aid only; never saved with the model).

    Dense per-token supervision (what covers the token: colour or text, its shape and local motion step;
    labels from :func:`training.token_labels.token_labels`) makes the vision tower encode what is drawn where, so the
    language model has something to read, and keeps the feature scale bounded
    (``norm_penalty``: squared excess of the per-token RMS over ``max_rms``).
    """

    def __init__(self, hidden: int, max_rms: float = 1.0):
        super().__init__()
        self.heads = torch.nn.ModuleDict({k: torch.nn.Linear(hidden, n) for k, n in AUX_HEADS.items()})
        self.max_rms = max_rms

    def loss(self, feats: torch.Tensor, aux: dict) -> tuple[torch.Tensor, dict]:
        """feats (N, hidden) float; aux: int64 (N,) labels per head -> (scalar loss, accuracies)."""
        total, acc = feats.new_zeros(()), {}
        for k, head in self.heads.items():
            logits = head(feats.float())
            lab = aux[k]
            # class-balanced: background tokens dominate, weight object tokens up
            w = torch.where(lab > 0, 4.0, 1.0)
            total = total + (F.cross_entropy(logits, lab, reduction="none") * w).sum() / w.sum()
            fg = lab > 0
            acc[k] = float((logits.detach().argmax(-1)[fg] == lab[fg]).float().mean()) if fg.any() else float("nan")
        rms = feats.float().pow(2).mean(-1).sqrt()
        total = total + (F.relu(rms - self.max_rms) ** 2).mean()
        acc["rms"] = float(rms.detach().mean())
        return total, acc


def capture_video_features(model) -> dict:
    """Forward hook on the vision tower; the dict gets ``feats`` (N, hidden) after each forward."""
    box: dict = {}

    def hook(_mod, _inp, out):
        box["feats"] = out.pooler_output if hasattr(out, "pooler_output") else out[1]

    model.model.visual.register_forward_hook(hook)
    return box


@torch.no_grad()
def video_gap(model, batch: dict) -> tuple[float, float]:
    """(loss with the right videos, loss with videos rolled by one inside the batch).

    The gap says how much the model reads the video (0 = it ignores it).
    """
    model.eval()
    inputs = model_inputs(batch, labels=True)
    right = float(model(**inputs).loss)
    B = batch["video_grid_thw"].shape[0]
    pv = batch["pixel_values_videos"].view(B, -1, batch["pixel_values_videos"].shape[-1])
    inputs["pixel_values_videos"] = torch.roll(pv, 1, 0).reshape(-1, pv.shape[-1])
    wrong = float(model(**inputs).loss)
    model.train()
    return right, wrong


FOCUS_IMPL = "train_focus"


FOCUS: dict = {"rows": None, "out": [], "attr_rows": None, "out_attr": [], "fact_rows": None, "out_fact": []}


def _focus_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """SDPA, plus the head-averaged attention of the rows in ``FOCUS["rows"]`` (training aid).

    ``FOCUS["rows"]`` = (idx int64 (B, R) query positions, valid bool (B, R), keys_ok bool (B, L));
    appends float32 (B, L): attention of those rows averaged over heads and valid rows — the
    quantity Stage I ranks video tokens by (:func:`specvlm.engine.prefill.attention_scores`).
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    out = sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                 scaling=scaling, **kwargs)
    rows = FOCUS["rows"]
    if rows is not None and query.shape[2] == key.shape[2]:
        idx, valid, keys_ok = rows
        p = _row_attention(query, key, idx, keys_ok, scaling)                    # (B, R, L)
        w = valid.float()
        FOCUS["out"].append((p * w[..., None]).sum(1) / w.sum(1).clamp(min=1.0)[:, None])
        if FOCUS.get("attr_rows") is not None:
            FOCUS["out_attr"].append(_row_attention(query, key, FOCUS["attr_rows"], keys_ok, scaling))
        if FOCUS.get("fact_rows") is not None:
            FOCUS["out_fact"].append(_row_attention(query, key, FOCUS["fact_rows"], keys_ok, scaling))
    return out


def _row_attention(query, key, idx, keys_ok, scaling) -> torch.Tensor:
    """Head-averaged causal attention probabilities of query rows ``idx`` (B, R) -> float32 (B, R, L)."""
    B, H, L, D = query.shape
    R = idx.shape[1]
    q = query.gather(2, idx[:, None, :, None].expand(B, H, R, D))
    k = key.repeat_interleave(H // key.shape[1], dim=1) if key.shape[1] != H else key
    s = (q @ k.transpose(-1, -2)).float() * (scaling if scaling is not None else D ** -0.5)
    ok = (torch.arange(L)[None, None, :] <= idx[:, :, None]) & keys_ok[:, None, :]
    return s.masked_fill(~ok[:, None], float("-inf")).softmax(-1).mean(1)


def register_focus() -> None:
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(FOCUS_IMPL, _focus_attention)
    AttentionMaskInterface.register(FOCUS_IMPL, sdpa_mask)


def focus_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor, video_id: int,
               header: list[int], text_start: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Query rows whose attention Stage I ranks video tokens by: the prompt after the video.

    For each row of the batch: positions after the last video token (after the subtitle transcript:
    ``text_start[b]`` when given) up to the end of the first ``<|im_start|>assistant\n`` header
    after it (pass B of :func:`specvlm.engine.prefill.prefill_target`).

    Returns:
        idx int64 (B, R), valid bool (B, R), keys_ok bool (B, L) (non-padding keys).
    """
    B, L = input_ids.shape
    spans = []
    n = len(header)
    for b in range(B):
        ids = input_ids[b].tolist()
        start = after_video(ids, video_id) if text_start is None else int(text_start[b])
        end = start
        for j in range(start, L - n + 1):
            if ids[j:j + n] == header:
                end = j + n
                break
        spans.append((start, max(end, start + 1)))
    R = max(e - s for s, e in spans)
    idx = torch.zeros(B, R, dtype=torch.long)
    valid = torch.zeros(B, R, dtype=torch.bool)
    for b, (s, e) in enumerate(spans):
        idx[b, :e - s] = torch.arange(s, e)
        valid[b, :e - s] = True
    return idx, valid, attention_mask.bool()


def focus_loss(per_layer: list[torch.Tensor], input_ids: torch.Tensor, video_id: int,
               cover: torch.Tensor) -> tuple[torch.Tensor, float]:
    """-log(coverage-weighted share of the video attention on object/text pixels), mean over layers.

    share = sum_i a_i c_i / sum_i a_i over video tokens i, with a_i the attention and c_i the
    share of token i's pixels that are object or text pixels: the pixel share of attention.

    Args:
        per_layer: float32 (B, L) per layer from :func:`_focus_attention`.
        cover: float32 (B * V,) per-video-token coverage (:func:`token_labels` ``cover``).

    Returns:
        (scalar loss, mean share as a float).
    """
    vmask = input_ids == video_id
    obj = torch.zeros(vmask.shape, dtype=torch.float32)
    obj[vmask] = cover.float()
    has = obj.sum(1) > 0
    if not bool(has.any()):      # no object/text pixel in any row: nothing to focus on
        return per_layer[0].new_zeros(()), float("nan")
    losses, shares = [], []
    for a in per_layer:
        share = (a * obj).sum(1) / (a * vmask.float()).sum(1).clamp(min=1e-9)
        losses.append(-torch.log(share[has] + 1e-4).mean())
        shares.append(float(share[has].detach().mean()))
    return torch.stack(losses).mean(), float(np.mean(shares))


def spread_focus_loss(per_layer: list[torch.Tensor], input_ids: torch.Tensor, video_id: int,
                      cover: torch.Tensor, obj_labels: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Cross-entropy of the prompt's video attention against an equal share per named thing.

    The target distribution q over a row's video tokens gives every object and the on-screen text
    (``obj`` labels > 0) the same total mass, spread over its tokens by pixel coverage. A flash on
    four tokens then gets as much of Stage I's attention as an object visible on two hundred, so
    Stage I's top-λ set holds the rare tokens first. Loss = -Σ q_i log(a_i / Σ_video a), mean over
    rows with a named thing and over layers.

    Args:
        per_layer: float32 (B, L) per layer from :func:`_focus_attention`.
        cover: float32 (B * V,) per-video-token coverage; obj_labels: int64 (B * V,) (:func:`token_labels`).

    Returns:
        (scalar loss, mean share of the attention on object/text pixels as a float, as :func:`focus_loss`).
    """
    vmask = input_ids == video_id
    c = torch.zeros(vmask.shape, dtype=torch.float32)
    lab = torch.zeros(vmask.shape, dtype=torch.long)
    c[vmask], lab[vmask] = cover.float(), obj_labels
    c = torch.where(lab > 0, c, 0.0)
    n_lab = int(lab.max()) + 1
    per_obj = torch.zeros(vmask.shape[0], n_lab).scatter_add_(1, lab, c)         # (B, n_lab)
    n_things = (per_obj[:, 1:] > 0).sum(1).clamp(min=1)
    q = c / per_obj.gather(1, lab).clamp(min=1e-9) / n_things[:, None]
    has = q.sum(1) > 0
    if not bool(has.any()):      # no named thing on any labelled token
        return per_layer[0].new_zeros(()), float("nan")
    cov = torch.zeros(vmask.shape, dtype=torch.float32)
    cov[vmask] = cover.float()
    losses, shares = [], []
    for a in per_layer:
        va = (a * vmask.float())
        p = va / va.sum(1, keepdim=True).clamp(min=1e-9)
        losses.append(-(q[has] * torch.log(p[has] + 1e-6)).sum(1).mean())
        shares.append(float((p[has] * cov[has]).sum(1).detach().mean()))
    return torch.stack(losses).mean(), float(np.mean(shares))


def routing_loss(per_layer: list[torch.Tensor], input_ids: torch.Tensor, video_id: int, obj_labels: torch.Tensor,
                 valid: torch.Tensor, obj: torch.Tensor) -> tuple[torch.Tensor, float]:
    """-log(share of a row's video attention on the tokens of the object it names), mean over rows, layers.

    Args:
        per_layer: float32 (B, R, L) per layer (:func:`_row_attention` of :func:`attribute_rows`).
        obj_labels: int64 (B * V,) per-video-token object (:func:`token_labels` ``obj``).
        valid, obj: from :func:`attribute_rows`.

    Returns:
        (scalar loss, mean share); (0, nan) without rows.
    """
    if not bool(valid.any()):
        return per_layer[0].new_zeros(()), float("nan")
    vmask = input_ids == video_id
    lab = torch.zeros(vmask.shape, dtype=torch.long)
    lab[vmask] = obj_labels
    target = (lab[:, None, :] == (obj + 1)[:, :, None]) & vmask[:, None, :]     # (B, R, L)
    ok = valid & target.any(-1)
    if not bool(ok.any()):       # the named objects cover no labelled token (e.g. hidden under the text)
        return per_layer[0].new_zeros(()), float("nan")
    losses, shares = [], []
    for a in per_layer:
        share = (a * target).sum(-1) / (a * vmask[:, None, :]).sum(-1).clamp(min=1e-9)
        losses.append(-torch.log(share[ok] + 1e-4).mean())
        shares.append(float(share[ok].detach().mean()))
    return torch.stack(losses).mean(), float(np.mean(shares))


def fact_routing_loss(per_layer: list[torch.Tensor], valid: torch.Tensor, target: torch.Tensor
                      ) -> tuple[torch.Tensor, float]:
    """-log(share of a row's attention on its transcript keys), mean over rows and layers.

    Teaches the target to read a subtitle fact from the transcript (where the draft without the transcript
    cannot), instead of writing a likely-looking value.

    Args:
        per_layer: float32 (B, R, L) per layer (:func:`_row_attention` of :func:`training.data.fact_rows`).
        valid: bool (B, R); target: bool (B, R, L) per row (or (B, L) for every row of a clip), from
            :func:`training.data.fact_rows`.

    Returns:
        (scalar loss, mean share); (0, nan) without rows.
    """
    if not bool(valid.any()):
        return per_layer[0].new_zeros(()), float("nan")
    losses, shares = [], []
    for a in per_layer:
        share = (a * (target if target.dim() == 3 else target[:, None, :])).sum(-1)[valid]
        losses.append(-torch.log(share + 1e-4).mean())
        shares.append(float(share.detach().mean()))
    return torch.stack(losses).mean(), float(np.mean(shares))


def salient_order(cover: torch.Tensor, obj: torch.Tensor) -> torch.Tensor:
    """Video tokens on a named object or text, most informative first: int64 (n,) indices.

    The weight of a token is its coverage divided by its object's total coverage (the
    :func:`spread_focus_loss` target), so the tokens of a flash or brief text come before those of an
    object visible all clip long: the order in which Stage I takes them from a trained target.
    """
    c = torch.where(obj > 0, cover.float(), 0.0)
    tot = torch.zeros(int(obj.max()) + 1).scatter_add_(0, obj, c)
    w = c / tot[obj].clamp(min=1e-9)
    order = torch.argsort(w, descending=True)
    return order[w[order] > 0]


def _kept_video(V: int, K: int, rng: np.random.Generator, first: np.ndarray | None = None) -> np.ndarray:
    """K sorted video-token indices: ``first`` (salient, in order), then half evenly spaced, half random."""
    chosen = np.asarray(first if first is not None else [], dtype=np.int64)[:K]
    rest_n = K - len(chosen)
    n_uni = rest_n // 2
    uni = np.linspace(0, V - 1, n_uni).astype(np.int64) if n_uni else np.array([], np.int64)
    chosen = np.union1d(chosen, uni)
    rest = np.setdiff1d(np.arange(V), chosen)
    rnd = rng.choice(rest, K - len(chosen), replace=False) if K > len(chosen) else np.array([], np.int64)
    return np.sort(np.concatenate([chosen, rnd]).astype(np.int64))


def draft_forward(draft, batch: dict, keep_frac: float | None, rng: np.random.Generator,
                  salient: bool = False):
    """Draft logits on the full sequence or with only ``keep_frac`` of the video tokens.

    Pruned, each row keeps K = ``keep_frac`` x V video tokens at their original positions: with
    ``salient``, first the row's object/text tokens in :func:`salient_order` up to a random share
    (30-90%) of their weight (as Stage I keeps the target's most attended tokens), then half evenly
    spaced and half random tokens (as Stage II fills the budget); else only the latter.

    Returns:
        logits (B, L', vocab), index int64 (B, L') of the kept sequence positions per row.
    """
    inputs = model_inputs(batch)
    B, L = batch["input_ids"].shape
    if keep_frac is None:
        return draft(**inputs).logits, torch.arange(L).expand(B, L)
    m = draft.model
    ids = batch["input_ids"]
    emb = m.get_input_embeddings()(ids)
    vid = m.get_video_features(batch["pixel_values_videos"], batch["video_grid_thw"], return_dict=True)
    vid = torch.cat(vid.pooler_output, dim=0).to(emb.dtype)
    vmask = (ids == draft.config.video_token_id)
    emb = emb.masked_scatter(vmask.unsqueeze(-1).expand_as(emb), vid)
    pos, _ = m.get_rope_index(ids, mm_token_type_ids=batch["mm_token_type_ids"],
                              video_grid_thw=batch["video_grid_thw"],
                              second_per_grid_ts=batch["second_per_grid_ts"],
                              attention_mask=batch["attention_mask"])
    vpos = torch.nonzero(vmask[0]).squeeze(1)           # same layout in every row
    V = len(vpos)
    K = max(1, int(V * keep_frac))
    text_pos = torch.nonzero(~vmask[0]).squeeze(1)
    rows = []
    for b in range(B):
        first = None
        if salient:
            cov, obj = batch["aux"]["cover"][b * V:(b + 1) * V], batch["aux"]["obj"][b * V:(b + 1) * V]
            order = salient_order(cov, obj)
            if len(order):
                c = torch.where(obj > 0, cov.float(), 0.0)
                w = (c / torch.zeros(int(obj.max()) + 1).scatter_add_(0, obj, c)[obj].clamp(min=1e-9))[order]
                cum = torch.cumsum(w, 0) / w.sum()
                n = int((cum < float(rng.uniform(0.3, 0.9))).sum()) + 1
                first = order[:n].numpy()
        kept = vpos[torch.as_tensor(_kept_video(V, K, rng, first))]
        rows.append(torch.sort(torch.cat([text_pos, kept])).values)
    index = torch.stack(rows)                                                     # (B, L')
    D = emb.shape[-1]
    out = draft(inputs_embeds=emb.gather(1, index[..., None].expand(B, -1, D)),
                position_ids=pos.gather(2, index[None].expand(pos.shape[0], B, -1)),
                attention_mask=batch["attention_mask"].gather(1, index))
    return out.logits, index


def distill_loss(draft, teacher, batch: dict, rng, args):
    """0.5 * CE(labels) + 0.5 * T^2-free KL(teacher || draft) on every labelled position.

    ``args.prune_prob`` of the batches keep 10-30% of the video tokens (:func:`draft_forward`), a
    share ``args.salient_prob`` of those with the object/text tokens first.
    """
    labels = batch["labels"]
    with torch.no_grad():
        inputs = model_inputs(batch)
        t_logits = teacher(**inputs).logits.float()
    keep = float(rng.uniform(0.1, 0.3)) if rng.random() < args.prune_prob else None
    salient = keep is not None and rng.random() < getattr(args, "salient_prob", 0.0)
    d_logits, index = draft_forward(draft, batch, keep, rng, salient)
    d_logits = d_logits.float()
    # predict token i+1 from position i, at labelled positions
    lab = labels.gather(1, index)
    tgt = lab[:, 1:]
    mask = tgt != IGNORE
    d = d_logits[:, :-1][mask]
    t = t_logits.gather(1, index[..., None].expand(-1, -1, t_logits.shape[-1]))[:, :-1][mask]
    ce = F.cross_entropy(d, tgt[mask])
    kl = F.kl_div(F.log_softmax(d, -1), F.log_softmax(t, -1), log_target=True, reduction="batchmean")
    return 0.5 * ce + 0.5 * kl
