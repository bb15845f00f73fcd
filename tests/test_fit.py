"""GPU fitting on the CPU: memory estimates, placement, dtype choice and the loader, with fake CUDA devices."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import specvlm.models.loading as loading
from specvlm.models import fit
from specvlm.models.fit import GIB, GpuInfo, ModelSize, PresetTooLargeError
from specvlm.models.presets import (BUNDLED_LARGE_SELF, BUNDLED_LARGE_STD, BUNDLED_SELF, BUNDLED_STD, PRESETS,
                                    QWEN7_SELF, SMOLVLM2_2B, SMOLVLM2_CPU, SPARSE_SELF, SPARSE_STD)

Q7, Q32 = fit.KNOWN_SIZES["Qwen/Qwen2.5-VL-7B-Instruct"], fit.KNOWN_SIZES["Qwen/Qwen2.5-VL-32B-Instruct"]
A10G = GpuInfo(0, "NVIDIA A10G", 24 * 10**9, 23 * 10**9, True)
T4 = GpuInfo(0, "Tesla T4", 16 * 10**9, 15 * 10**9, False)
H100 = [GpuInfo(i, "NVIDIA H100 80GB HBM3", 85 * 10**9, 84 * 10**9, True) for i in range(2)]


def test_kv_and_weight_bytes_are_the_formula():
    assert Q7.weight_bytes(2) == pytest.approx(16.58e9)
    assert Q7.kv_bytes(1000, 2) == 2 * 28 * 4 * 128 * 2 * 1000  # 57,344 bytes per token in bf16
    est = fit.estimate_pair(Q7, None, 2, video_tokens=16384, text_tokens=512, max_new_tokens=256, drop_rate=0.9)
    t_tok = 512 + 16384 + 256 + fit.TREE_SLOTS
    d_tok = 512 + 1638 + 256 + fit.TREE_SLOTS
    assert est.tokens == t_tok
    assert est.kv == Q7.kv_bytes(t_tok, 2) + Q7.kv_bytes(d_tok, 2)  # Self-SD: a second, pruned cache
    assert est.weights == Q7.weight_bytes(2)  # the draft is the target's own weights
    assert est.total == est.weights + est.kv + fit.OVERHEAD_BYTES + 0.1 * est.weights


def test_std_sd_adds_the_draft_weights():
    self_sd = fit.estimate_pair(Q32, None, 2)
    std = fit.estimate_pair(Q32, Q7, 2)
    assert std.weights - self_sd.weights == pytest.approx(Q7.weight_bytes(2))
    assert std.total > 90e9


def test_preset_estimates_follow_frames():
    q = fit.preset_estimate(PRESETS[QWEN7_SELF])
    assert q.tokens == 512 + 128 * 128 + PRESETS[QWEN7_SELF].max_new_tokens + fit.TREE_SLOTS
    assert 19e9 < q.total < 23e9


def test_size_from_config_counts_real_parameters(qwen_tiny):
    model = qwen_tiny[0]
    size = fit.size_from_config(model.config)
    assert size.params == sum(p.numel() for p in model.parameters())
    text = model.config.text_config
    assert (size.layers, size.kv_heads, size.head_dim) == (text.num_hidden_layers, text.num_key_value_heads,
                                                           text.hidden_size // text.num_attention_heads)


def test_one_gpu_when_it_fits():
    p = fit.plan_placement(fit.estimate_pair(Q7, None, 2), [A10G])
    assert p.device_map == {"": "cuda:0"} and "NVIDIA A10G" in p.reason


def test_several_gpus_use_auto():
    est = fit.estimate_pair(Q32, Q7, 2)
    assert fit.plan_placement(est, H100).device_map == "auto"
    assert fit.plan_placement(est, H100, device="cuda:1").device_map == "auto"


def test_refusal_is_one_line_naming_needed_and_available():
    with pytest.raises(PresetTooLargeError) as e:
        fit.plan_placement(fit.estimate_pair(Q32, Q7, 2), [A10G], name="Qwen2.5-VL-32B + 7B draft")
    msg = str(e.value)
    assert "\n" not in msg and isinstance(e.value, ValueError)
    assert msg.startswith("Qwen2.5-VL-32B + 7B draft needs ~98.")
    assert "23.0 GB free on 1 GPU (NVIDIA A10G)" in msg and "pick a smaller preset" in msg


def test_dtype_bf16_only_where_supported():
    assert fit.default_gpu_dtype([A10G]) is torch.bfloat16
    assert fit.default_gpu_dtype([T4]) is torch.float16
    assert fit.default_gpu_dtype([A10G, T4]) is torch.float16
    assert loading._resolve_dtype(None, "cuda", (T4,)) is torch.float16
    assert loading._resolve_dtype(None, "cpu", (A10G,)) is torch.float32
    assert loading._resolve_dtype("bfloat16", "cuda", (T4,)) is torch.bfloat16  # an explicit choice is kept


@pytest.fixture
def fake_cuda(monkeypatch):
    """Two fake CUDA devices: a T4 (cc 7.5) with 15 GB free and an A10G (cc 8.6) with 23 GB free."""
    props = [SimpleNamespace(name="Tesla T4", total_memory=16 * 10**9, major=7),
             SimpleNamespace(name="NVIDIA A10G", total_memory=24 * 10**9, major=8)]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(props))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props[i])
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: (props[i].total_memory - 10**9, props[i].total_memory))
    return props


def test_detect_gpus_reads_cuda(fake_cuda):
    gpus = fit.detect_gpus()
    assert gpus == (GpuInfo(0, "Tesla T4", 16 * 10**9, 15 * 10**9, False),
                    GpuInfo(1, "NVIDIA A10G", 24 * 10**9, 23 * 10**9, True))


def test_loader_loads_straight_to_the_gpu_in_the_right_dtype(fake_cuda, monkeypatch):
    seen = []
    monkeypatch.setattr(loading, "_load_one", lambda path, dev, dt, dm: seen.append((path, dev, dt, dm)) or
                        (_ for _ in ()).throw(RuntimeError("stop after planning")))
    with pytest.raises(RuntimeError, match="stop after planning"):
        loading.load_pair("Qwen/Qwen2.5-VL-7B-Instruct", device="cuda:1")
    assert seen == [("Qwen/Qwen2.5-VL-7B-Instruct", "cuda:1", torch.float16, {"": "cuda:1"})]  # T4 present: fp16


def test_loader_refuses_before_loading(fake_cuda, monkeypatch):
    monkeypatch.setattr(loading, "_load_one", lambda *a: pytest.fail("loaded a pair that cannot fit"))
    with pytest.raises(PresetTooLargeError, match=r"needs ~\d+\.\d GB of GPU memory .* 38\.0 GB free on 2 GPUs"):
        loading.load_pair("Qwen/Qwen2.5-VL-32B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct", device="cuda")


def test_loader_keeps_an_explicit_device_map(fake_cuda, monkeypatch):
    seen = []
    monkeypatch.setattr(loading, "_load_one", lambda path, dev, dt, dm: seen.append(dm) or
                        (_ for _ in ()).throw(RuntimeError("stop")))
    with pytest.raises(RuntimeError):
        loading.load_pair("Qwen/Qwen2.5-VL-32B-Instruct", device="cuda", dtype="bfloat16", device_map="auto")
    assert seen == ["auto"]


def test_gpus_that_cannot_be_queried_skip_the_check(fake_cuda, monkeypatch):
    def broken(i):
        raise RuntimeError("CUDA is not initialised in this process")

    monkeypatch.setattr(torch.cuda, "get_device_properties", broken)
    assert fit.detect_gpus() == ()
    assert fit.default_gpu_dtype(()) is torch.bfloat16
    assert loading.plan_device_map("Qwen/Qwen2.5-VL-72B-Instruct", None, "cuda", torch.bfloat16, ()) == {"": "cuda"}


def test_unknown_size_loads_straight_to_the_device(fake_cuda):
    assert loading.plan_device_map("someone/unknown-vlm", None, "cuda:0", torch.bfloat16, fit.detect_gpus()) == {
        "": "cuda:0"}
    assert loading.plan_device_map("someone/unknown-vlm", None, "cpu", torch.float32, ()) is None


def test_presets_that_fit(fake_cuda):
    cpu = {BUNDLED_STD, BUNDLED_SELF, SPARSE_STD, SPARSE_SELF, BUNDLED_LARGE_STD, BUNDLED_LARGE_SELF, SMOLVLM2_CPU}
    assert set(fit.fitting_presets(PRESETS, [A10G])) == cpu | {QWEN7_SELF, "LLaVA-OneVision-7B Self-SD", SMOLVLM2_2B}
    assert set(fit.fitting_presets(PRESETS, [T4])) == cpu | {SMOLVLM2_2B}
    assert set(fit.fitting_presets(PRESETS, [])) == cpu
    ok, why = fit.preset_fits(PRESETS["LLaVA-OneVision-72B + 7B draft"], H100)
    assert not ok and "168.0 GB free on 2 GPUs" in why
    assert fit.preset_fits(PRESETS[QWEN7_SELF], []) == (False, f"{QWEN7_SELF} needs a CUDA GPU and none is "
                                                               "available here.")


@pytest.mark.timeout(10)
def test_unreachable_hub_fails_fast_with_one_message(monkeypatch):
    monkeypatch.setattr(loading, "hub_reachable", lambda timeout_s=2.0: False)
    with pytest.raises(loading.ModelLoadError) as e:
        loading._load_one("nonexistent-org/no-such-model-xyz", "cpu", torch.float32, None)
    assert "Hub is not reachable from here" in str(e.value) and "Qwen2.5-VL / LLaVA-OneVision" in str(e.value)


def test_default_preset_without_hub_or_cache_is_the_bundled_pair(fake_cuda, monkeypatch):
    from specvlm.models import hub, presets

    monkeypatch.setattr(hub, "hub_reachable", lambda timeout_s=2.0: False)
    monkeypatch.setattr(hub, "in_local_cache", lambda repo: False)
    assert presets.default_preset_name() == BUNDLED_STD
    monkeypatch.setattr(hub, "in_local_cache", lambda repo: repo == "Qwen/Qwen2.5-VL-7B-Instruct")
    assert presets.default_preset_name() == BUNDLED_STD    # Self-SD cannot beat vanilla on a GPU: never a default
    monkeypatch.setattr(hub, "in_local_cache", lambda repo: repo.startswith("Qwen/Qwen2.5-VL-"))
    assert presets.default_preset_name() == presets.QWEN7_3B
    monkeypatch.setattr(hub, "in_local_cache", lambda repo: True)
    assert presets.default_preset_name() == presets.QWEN3_8B_2B == presets.GPU_DEFAULTS[0]


def test_overhead_is_a_margin_not_zero():
    tiny = ModelSize(1e6, 1, 1, 8)
    assert fit.estimate_pair(tiny, None, 4).total > fit.OVERHEAD_BYTES > GIB
