"""scripts/gpu_check.py at tiny sizes on the CPU, so the GPU script cannot rot."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_tiny_run_prints_projection(gpu_check, tmp_path, capsys):
    out = tmp_path / "g.json"
    rc = gpu_check.main(["--tiny", "--video-tokens", "128", "--iters", "2", "--warmup", "1", "--out-json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "projected speedup = (τ + 1) · t_vanilla / (depth · t_draft + t_verify)" in text
    res = json.loads(out.read_text())
    assert [r["pair"] for r in res] == ["tiny Self-SD", "tiny-big + tiny draft"]
    for r in res:
        assert r["L"] == 64 + 128 and r["L_draft"] == 64 + 12
        assert min(r["t_vanilla_ms"], r["t_draft_ms"], r["t_draft_chain_ms"], r["t_verify_ms"]) > 0
        assert set(r["projected"]) == {"2", "3", "4", "5"}
        assert r["projected"]["5"] > r["projected"]["2"] > 0


def test_formula_and_tree(gpu_check):
    assert gpu_check.projected_speedup(3, 10.0, 1.0, 15.0, 5) == pytest.approx(4 * 10 / 20)
    parents = gpu_check.tree_parents(16, 4).tolist()
    assert parents[:4] == [-1] * 4 and parents[4:8] == [0] * 4 and all(p < i for i, p in enumerate(parents))


def test_published_configs(gpu_check):
    q7 = gpu_check.QWEN7
    assert (q7["hidden_size"], q7["num_hidden_layers"], q7["num_attention_heads"], q7["num_key_value_heads"],
            q7["intermediate_size"], q7["vocab_size"], q7["mrope_section"]) == (3584, 28, 28, 4, 18944, 152064,
                                                                                 [16, 24, 24])
    head_dim = q7["hidden_size"] // q7["num_attention_heads"]
    assert sum(q7["mrope_section"]) == head_dim // 2
    q32 = gpu_check.QWEN32
    assert sum(q32["mrope_section"]) == q32["hidden_size"] // q32["num_attention_heads"] // 2
