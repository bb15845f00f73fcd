"""The app with the newer families: ``save_pretrained`` folders of tiny Qwen3-VL (MoE target, dense
draft) and SmolVLM2 (Std-SD) models, entered in the custom-model box as ``target + draft`` and run by
the real engine: lossless, with pruning heatmaps and the accepted-length chart."""
from __future__ import annotations

import pytest

from helpers.engines import run_to_end
from helpers.media import write_video

from app.runs.backend import Backend
from app.runs.facade import SpecvlmFacade


def _save(tmp_path, name, model, processor):
    model.save_pretrained(tmp_path / name)
    processor.save_pretrained(tmp_path / name)
    return str(tmp_path / name)


def _qwen3(tmp_path):
    from specvlm.testing.tiny_qwen3_vl import tiny_qwen3_vl
    return (_save(tmp_path, "target", *tiny_qwen3_vl(seed=0, moe=True)),
            _save(tmp_path, "draft", *tiny_qwen3_vl(seed=1, layers=1)))


def _smolvlm(tmp_path):
    from specvlm.testing.tiny import tiny_smolvlm
    return (_save(tmp_path, "target", *tiny_smolvlm(seed=0)),
            _save(tmp_path, "draft", *tiny_smolvlm(seed=1, layers=1)))


@pytest.mark.parametrize("build", [_qwen3, _smolvlm], ids=["qwen3_vl_moe", "smolvlm"])
def test_custom_folders_of_new_families_run_losslessly_with_heatmaps(tmp_path, build):
    target, draft = build(tmp_path)
    clip = write_video(tmp_path / "clip.mp4", n=8, w=96, h=64)
    backend = Backend(SpecvlmFacade(), device="cpu", dtype="float32")
    last = run_to_end(backend, clip, custom_model=f"{target} + {draft}", num_frames=4, max_new_tokens=16)
    assert "error" not in last or not last["error"], last.get("error")
    assert last["status"].startswith("**Done.**"), last["status"]
    assert "Outputs identical" in last["summary"], last["summary"]
    assert last["gallery"] and "kept" in last["gallery"][0][1]
    assert last["accept_plot"] is not None
