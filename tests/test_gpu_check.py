"""scripts/gpu_check.py --cpu-smoke: the GPU check's code on tiny models of the same structure, on the CPU."""
from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def gpu_check():
    from scripts import gpu_check
    return gpu_check


def test_cpu_smoke_runs_the_engine_end_to_end(gpu_check, tmp_path, capsys):
    out = tmp_path / "g.json"
    rc = gpu_check.main(["--cpu-smoke", "--setups", "qwen7-qwen3b,qwen3-8b-2b,llava72-llava7", "--max-verify", "4",
                         "--bandwidth", "5e10", "--out-json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert text.startswith("Device: CPU (tiny models) (memory bandwidth 0.05 TB/s)")
    assert "projected speedup = (τ + 1) · t_decode / (5 · t_level + t_verify)" in text
    assert "| byte floor | " in text and "x of " in text
    data = json.loads(out.read_text())
    assert data["variants"] == ["plain", "reselect"] and data["bandwidth"] == 5e10
    res = data["results"]
    assert [r["key"] for r in res] == ["qwen7-qwen3b", "qwen3-8b-2b", "llava72-llava7"]
    qwen, _, llava = res
    assert qwen["video_tokens"] == 16 and qwen["L_draft"] < qwen["L"]  # 8 frames of 56 px: 4 groups x 2x2 tokens
    assert llava["video_tokens"] == 8 * 4 + 1  # 4 tokens per 28 px frame + the newline token
    assert llava["target_layers"] == "2/3" and llava["depth_scale"] == pytest.approx(1.5)
    for r in res:
        f = r["floor"]
        assert f["decode_ms"] == pytest.approx(1e3 * f["target_step_bytes"] / 5e10)
        assert 0 < f["draft_level_ms"] < f["decode_ms"] and f["ceiling"]["all_accepted"] > f["ceiling"]["3.8"] > 1
        assert set(r["variants"]) == {"plain", "reselect"}
        for e in r["variants"].values():
            # fp32 on the CPU: SpecVLM (Std-SD, padded draft vocabulary) is token-identical to vanilla
            assert e["counts"]["identical"] == 1 and not e["divergences"]
            assert min(e["decode_step_ms"], e["draft_level_ms"], e["verify_step_ms"], e["warmup_s"]) > 0
            assert e["vs_floor"]["decode"] == pytest.approx(e["decode_step_ms"] / f["decode_ms"])
            assert set(e["projected"]) == {"2.5", "3.0", "3.8"}
            assert e["projected"]["3.8"] > e["projected"]["2.5"] > 0
        assert set(r["isolated"]["verify_curve_ms"]) == {"1", "2", "4"}
    assert llava["variants"]["plain"]["paper_speedup"] == 2.68


def test_floors_and_projections_are_the_ceiling_math(gpu_check):
    from scripts import gpu_report
    from specvlm.models.ceiling import DECODER_DIMS, pair_ceiling
    from specvlm.testing import realdims

    f = gpu_report.floors(realdims.QWEN2_5_VL_7B, None, 16384, 16384 + 512, 1638 + 512, 2, 4.8e12, 5)
    assert f["decode_ms"] == pytest.approx(3.15, abs=0.05)        # 15.1 GB at 4.8 TB/s
    ref = pair_ceiling(DECODER_DIMS["Qwen/Qwen2.5-VL-7B-Instruct"], None)
    assert f["ceiling"]["all_accepted"] == pytest.approx(ref.all_accepted, abs=1e-3)
    f82 = gpu_report.floors(realdims.QWEN3_VL_8B, realdims.QWEN3_VL_2B, 16464, 16464 + 512, 1646 + 512, 2, 3.35e12, 5)
    assert f82["ceiling"]["3.0"] == pytest.approx(1.9, abs=0.1)
    runs = {"runs": [{"kind": "identical", "index": None, "margin": None}], "warmup_s": 1.0,
            "prefill_vanilla_s": [1.0], "prefill_specvlm_s": [1.2], "prune_s": [0.1], "draft_prefill_s": [0.2],
            "decode_ms": [10.0, 10.0], "draft_step_ms": [5.0, 5.0], "verify_step_ms": [15.0, 15.0],
            "tau_random_weights": [0.0]}
    row = gpu_report.variant_row("qwen7-self", runs, 1.0, 1.0, f, 5)
    assert row["draft_level_ms"] == 1.0 and row["projected"]["3.0"] == pytest.approx(4 * 10 / 20)
    assert row["speedup_at_paper_tau"] == pytest.approx(4.8 * 10 / 20)
    assert row["vs_floor"]["decode"] == pytest.approx(10.0 / f["decode_ms"])


def test_gpu_setups_are_the_papers_and_the_small_draft_pairs_at_16k_tokens(gpu_check):
    setups = gpu_check.gpu_setups(40)
    q7, q32, l72 = setups["qwen7-self"], setups["qwen32-qwen7"], setups["llava72-llava7"]
    assert (q7.target.name, q7.draft) == ("Qwen2.5-VL-7B", None)
    assert (q32.target.name, q32.draft.name) == ("Qwen2.5-VL-32B", "Qwen2.5-VL-7B")
    assert (l72.target.name, l72.draft.name, l72.target_layers) == ("LLaVA-OV-72B", "LLaVA-OV-7B", 40)
    q73, q82 = setups["qwen7-qwen3b"], setups["qwen3-8b-2b"]
    assert (q73.target.name, q73.draft.name) == ("Qwen2.5-VL-7B", "Qwen2.5-VL-3B")
    assert (q82.target.name, q82.draft.name) == ("Qwen3-VL-8B", "Qwen3-VL-2B")
    assert q7.frames // 2 * (448 // 28) ** 2 == 16384  # 64 groups x 16 x 16 merged tokens
    assert q82.frames // 2 * (448 // 32) ** 2 == 16464  # 84 groups x 14 x 14 merged tokens
    assert l72.frames * 14 * 14 + 1 == 16465  # 196 pooled tokens per 384 px frame + newline
    assert set(gpu_check.PAPER_SPEEDUP) | set(gpu_check.PAPER_TAU) == {"qwen7-self", "qwen32-qwen7",
                                                                        "llava72-llava7"}
    assert gpu_check.DEFAULT_SETUPS.split(",") == ["qwen7-self", "qwen7-qwen3b", "qwen3-8b-2b"]
    assert set(gpu_check.smoke_setups()) == set(setups)


def test_json_is_named_after_the_gpu(gpu_check):
    p = gpu_check.default_json_path("NVIDIA H100 80GB HBM3")
    assert p.parent == gpu_check.ROOT / "docs" / "bench" and p.name == "gpu_check_NVIDIA-H100-80GB-HBM3.json"


def test_unknown_gpu_or_variant_is_refused(gpu_check, monkeypatch, capsys):
    monkeypatch.setattr(gpu_check.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gpu_check.torch.cuda, "get_device_name", lambda d=None: "NVIDIA GeForce GTX 1080")
    assert gpu_check.main([]) == 2
    assert "give it with --bandwidth" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="--variants 'fast'"):
        gpu_check.main(["--cpu-smoke", "--variants", "fast"])


def test_unknown_setup_is_refused(gpu_check):
    with pytest.raises(SystemExit, match="unknown setup 'qwen9'"):
        gpu_check.main(["--cpu-smoke", "--setups", "qwen9"])


def test_without_cuda_it_says_so(gpu_check, monkeypatch, capsys):
    monkeypatch.setattr(gpu_check.torch.cuda, "is_available", lambda: False)
    assert gpu_check.main([]) == 2
    assert "use --cpu-smoke" in capsys.readouterr().err
