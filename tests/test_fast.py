"""specvlm.models.attention: the grouped-query attention used for tree verify / draft tree feeds."""
import pytest
import torch

from specvlm.models import attention as fast
from specvlm.bench.stepcost import ancestor_mask, verify_mask


def _reference(q, k, v, mask_bool):
    """Plain attention: KV repeated per head, bool mask (True = visible), float64."""
    h, kvh = q.shape[1], k.shape[1]
    k = k.repeat_interleave(h // kvh, dim=1).double()
    v = v.repeat_interleave(h // kvh, dim=1).double()
    s = q.double() @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    s = s.masked_fill(~mask_bool, float("-inf"))
    return (torch.softmax(s, -1) @ v).transpose(1, 2)


def _tree_parents(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.tensor([-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, n)])


@pytest.mark.parametrize("prefix,split_min", [(3000, 1024), (300, 1024), (300, 16)])
@pytest.mark.parametrize("as_bool", [False, True])
def test_gqa_attention_matches_reference(prefix, split_min, as_bool, monkeypatch):
    monkeypatch.setattr(fast, "MIN_SPLIT_PREFIX", split_min)
    torch.manual_seed(0)
    n, h, kvh, d = 12, 4, 2, 16
    parents = _tree_parents(n - 1, 1)
    fmask = verify_mask(parents, prefix, torch.float32)              # (1, 1, n, prefix + n)
    L = prefix + n
    q, k, v = torch.randn(1, h, n, d), torch.randn(1, kvh, L, d), torch.randn(1, kvh, L, d)
    visible = fmask == 0
    mask = visible if as_bool else fmask
    out, _ = fast.gqa_attention(None, q, k, v, mask)
    ref = _reference(q, k, v, visible)
    assert out.shape == (1, n, h, d)
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=1e-4)


def test_split_path_is_taken_and_matches_a_masked_middle(monkeypatch):
    """A draft-side mask: visible prefix, then earlier tree nodes that are only partly visible."""
    monkeypatch.setattr(fast, "MIN_SPLIT_PREFIX", 64)
    torch.manual_seed(1)
    base, fed, new, h, kvh, d = 200, 6, 4, 4, 1, 8
    allowed = torch.zeros(new, fed + new, dtype=torch.bool)
    allowed[:, fed:] = torch.eye(new, dtype=torch.bool)
    allowed[0, 1] = allowed[2, 3] = allowed[3, 0] = True
    visible = torch.cat([torch.ones(new, base, dtype=torch.bool), allowed], 1)[None, None]
    fmask = torch.zeros(visible.shape).masked_fill_(~visible, torch.finfo(torch.float32).min)
    L = base + fed + new
    q, k, v = torch.randn(1, h, new, d), torch.randn(1, kvh, L, d), torch.randn(1, kvh, L, d)
    out, _ = fast.gqa_attention(None, q, k, v, fmask)
    if fast._FLASH_CPU is not None:
        assert fast._FOLDED.entry.prefix == base
    torch.testing.assert_close(out.double(), _reference(q, k, v, visible), atol=2e-5, rtol=1e-4)


def test_fold_is_reused_for_the_same_mask_object_only():
    torch.manual_seed(2)
    parents = _tree_parents(5, 3)
    m1 = verify_mask(parents, 50, torch.float32)
    m2 = m1.clone()
    m2[..., -1] = torch.finfo(torch.float32).min                      # different content, same shape
    q, k, v = torch.randn(1, 4, 6, 8), torch.randn(1, 2, 56, 8), torch.randn(1, 2, 56, 8)
    a, _ = fast.gqa_attention(None, q, k, v, m1)
    b, _ = fast.gqa_attention(None, q, k, v, m2)
    torch.testing.assert_close(a.double(), _reference(q, k, v, m1 == 0), atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(b.double(), _reference(q, k, v, m2 == 0), atol=2e-5, rtol=1e-4)


def test_ancestor_mask_is_consistent_with_verify_mask():
    parents = _tree_parents(7, 4)
    visible = verify_mask(parents, 3, torch.float32)[0, 0] == 0
    assert visible[:, :3].all() and torch.equal(visible[1:, 4:], ancestor_mask(parents))


@pytest.mark.parametrize("h,kvh", [(4, 2), (8, 2), (4, 1)])
def test_decode_step_folds_query_heads(h, kvh, monkeypatch):
    """One unmasked query (a decode step) is folded onto its KV heads, never sent to transformers'
    enable_gqa path (which streams each KV head once per query head on the CPU)."""
    called = []
    monkeypatch.setattr(fast, "sdpa_attention_forward", lambda *a, **k: called.append(1))
    torch.manual_seed(2)
    L, d = 700, 16
    q, k, v = torch.randn(1, h, 1, d), torch.randn(1, kvh, L, d), torch.randn(1, kvh, L, d)
    out, _ = fast.gqa_attention(None, q, k, v, None)
    assert not called and out.shape == (1, 1, h, d)
    torch.testing.assert_close(out.double(), _reference(q, k, v, torch.ones(1, 1, 1, L, dtype=torch.bool)),
                               atol=2e-5, rtol=1e-4)
    # query head i reads KV head i // (h // kvh), as repeat_kv does
    k2, v2 = k.clone(), v.clone()
    k2[:, -1], v2[:, -1] = k2[:, -1] + 1.0, v2[:, -1] + 5.0
    out2, _ = fast.gqa_attention(None, q, k2, v2, None)
    g = h // kvh
    assert torch.equal(out2[0, 0, : (kvh - 1) * g], out[0, 0, : (kvh - 1) * g])
    assert not torch.allclose(out2[0, 0, (kvh - 1) * g:], out[0, 0, (kvh - 1) * g:])
