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
    rc = gpu_check.main(["--cpu-smoke", "--setups", "qwen32-qwen7,llava72-llava7", "--max-verify", "4",
                         "--out-json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert text.startswith("Device: CPU (tiny models)")
    assert "projected speedup = (τ + 1) · t_decode / (5 · t_level + t_verify(n))" in text
    res = json.loads(out.read_text())["results"]
    assert [r["key"] for r in res] == ["qwen32-qwen7", "llava72-llava7"]
    qwen, llava = res
    # fp32 on the CPU: SpecVLM (Std-SD, padded draft vocabulary) is token-identical to vanilla
    assert qwen["counts"]["identical"] == 1 and not qwen["divergences"]
    assert llava["counts"]["identical"] == 1
    assert qwen["video_tokens"] == 16 and qwen["L_draft"] < qwen["L"]  # 8 frames of 56 px: 4 groups x 2x2 tokens
    assert llava["video_tokens"] == 8 * 4 + 1  # 4 tokens per 28 px frame + the newline token
    assert llava["target_layers"] == "2/3" and llava["depth_scale"] == pytest.approx(1.5)
    for r in res:
        assert set(r["verify_curve_ms"]) == {"1", "2", "3", "4"}
        assert min(r["prefill_vanilla_s"], r["prefill_specvlm_s"], r["decode_step_ms"], r["draft_step_ms"],
                   r["verify_step_ms"], r["draft_level_ms"]) > 0
        assert r["projected"]["5"] > r["projected"]["2"] > 0
    assert qwen["paper_speedup"] == 2.11 and qwen["tau_for_paper_speedup"] > 0
    assert llava["paper_speedup"] == 2.68


def test_formulas(gpu_check):
    assert gpu_check.projected_speedup(3, 10.0, 1.0, 15.0, 5) == pytest.approx(4 * 10 / 20)
    s = gpu_check.projected_speedup(3.5, 20.0, 2.0, 25.0, 5)
    assert gpu_check.tau_needed(s, 20.0, 2.0, 25.0, 5) == pytest.approx(3.5)


def test_gpu_setups_are_the_papers_pairs_at_16k_tokens(gpu_check):
    setups = gpu_check.gpu_setups(40)
    q7, q32, l72 = setups["qwen7-self"], setups["qwen32-qwen7"], setups["llava72-llava7"]
    assert (q7.target.name, q7.draft) == ("Qwen2.5-VL-7B", None)
    assert (q32.target.name, q32.draft.name) == ("Qwen2.5-VL-32B", "Qwen2.5-VL-7B")
    assert (l72.target.name, l72.draft.name, l72.target_layers) == ("LLaVA-OV-72B", "LLaVA-OV-7B", 40)
    assert q7.frames // 2 * (448 // 28) ** 2 == 16384  # 64 groups x 16 x 16 merged tokens
    assert l72.frames * 14 * 14 + 1 == 16465  # 196 pooled tokens per 384 px frame + newline
    assert set(gpu_check.PAPER_SPEEDUP) | set(gpu_check.PAPER_TAU) == {"qwen7-self", "qwen32-qwen7",
                                                                        "llava72-llava7"}


def test_unknown_setup_is_refused(gpu_check):
    with pytest.raises(SystemExit, match="unknown setup 'qwen9'"):
        gpu_check.main(["--cpu-smoke", "--setups", "qwen9"])


def test_without_cuda_it_says_so(gpu_check, monkeypatch, capsys):
    monkeypatch.setattr(gpu_check.torch.cuda, "is_available", lambda: False)
    assert gpu_check.main([]) == 2
    assert "use --cpu-smoke" in capsys.readouterr().err
