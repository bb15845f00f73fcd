"""What the page says about inputs and models, in the user's terms: input notes without decoder internals
or server paths, model errors naming every supported family, the bundled model's caveat on a real video,
and the model-loading status."""
from __future__ import annotations

import shutil
from types import SimpleNamespace

from helpers.fakes import FakeEngine

from app.inputs.model_messages import SELF_SD_CPU_CAVEAT, families_text, model_error, run_caveat, synthetic_caveat
from app.inputs.settings import RunRequest, RunSettings
from app.runs.backend import Backend
from app.runs.worker import ClipReady
from app.views.run_view import RunView, user_note
from specvlm.config import CPU_MAX_NEW_TOKENS

INTERNAL = ("decoded with PyAV: decord could not read this gif file "
            "(DECORDError: Check failed: st_nb >= 0 (-1128613112 vs. 0))")


def test_input_notes_drop_decoder_internals_and_temp_paths():
    assert user_note(INTERNAL) == ("decoded with PyAV, the fallback decoder: the fast decoder cannot read this gif "
                                   "file")
    note = user_note("could not time /tmp/gradio/0f3a9c1e/anim.gif (Failed to measure duration); assumed 10 fps")
    assert note == "could not time anim.gif; assumed 10 fps"
    kept = "resized 20x20 (aspect ratio changed) so the model gets sides of at least 28 px"
    assert user_note(kept) == kept  # ordinary parentheses stay
    view = RunView("SpecVLM", None)
    upd = view.fold([ClipReady(4, (INTERNAL, "read /tmp/gradio/abc/x.gif"))])
    for text in (upd["status"], view.notes_text()):
        assert "DECORDError" not in text and "Check failed" not in text and "/tmp/" not in text
        assert "fallback decoder" in text and "x.gif" in text


def test_model_errors_name_every_supported_family():
    from specvlm.models.errors import ModelLoadError
    from specvlm.models.registry import supported_families
    fams = supported_families()
    assert {"Qwen2.5-VL", "LLaVA-OneVision", "Qwen3-VL", "SmolVLM2"} <= set(fams) and len(fams) == len(set(fams))
    msg = model_error("some/llama", None, ModelLoadError("model 'some/llama' has type 'llama': only llava_onevision, "
                                                          "qwen2_5_vl are supported."), False)
    assert msg.endswith(f"Supported families: {families_text()}.")
    for fam in fams:
        assert fam in msg
    remote = model_error("x/y", None, ValueError("needs trust_remote_code"), False)
    assert all(fam in remote for fam in fams)


def _bundled_engine():
    from specvlm.models.presets import BUNDLED_TARGET
    eng = FakeEngine(step_s=0.0)
    eng.presets = lambda: {"Bundled": SimpleNamespace(name="Bundled", target=str(BUNDLED_TARGET), draft=None,
                                                      description="bundled (fake)", num_frames=4,
                                                      requires_cuda=False, max_new_tokens=CPU_MAX_NEW_TOKENS)}
    eng.default_preset = lambda: "Bundled"
    return eng


def _last(backend, video, **settings):
    ups = list(backend.run(RunRequest(video=str(video), settings=RunSettings(**settings))))
    return ups, {k: v for u in ups for k, v in u.items()}


def test_bundled_model_on_a_real_video_says_it_only_knows_shapes(tmp_path):
    from specvlm import assets
    from specvlm.models.presets import BUNDLED_TARGET, LARGE_TARGET, SPARSE_TARGET
    clips = sorted(assets.path("videos").glob("*.mp4"))
    assert clips
    real = tmp_path / "earth.mp4"
    real.write_bytes(b"\x00" * 4096 + clips[0].read_bytes()[:100])
    copy = tmp_path / "copy.mp4"
    shutil.copyfile(clips[0], copy)  # Gradio hands the app a copy of an example
    assert "only knows synthetic shape videos" in synthetic_caveat(str(BUNDLED_TARGET), str(real))
    assert synthetic_caveat(str(BUNDLED_TARGET), str(copy)) == ""
    assert "only knows synthetic shape videos" in synthetic_caveat(str(SPARSE_TARGET), str(real))
    assert "only knows synthetic shape videos" in synthetic_caveat(str(LARGE_TARGET), str(real))
    assert synthetic_caveat("HuggingFaceTB/SmolVLM2-500M-Video-Instruct", str(real)) == ""
    backend = Backend(_bundled_engine())
    _, last = _last(backend, real, preset="Bundled")
    assert last["summary"].startswith("**This model only knows synthetic shape videos**")
    as_json = backend.run_json(RunRequest(video=str(real), settings=RunSettings(preset="Bundled")))
    assert as_json["caveat"].startswith("This model only knows synthetic shape videos")
    assert "engine" not in as_json and "vanilla_engine" not in as_json   # one engine: nothing to name
    _, last = _last(backend, copy, preset="Bundled")
    assert "synthetic shape" not in last["summary"] and "Outputs identical" in last["summary"]
    # this preset is Self-SD (no draft) on a CPU: the summary says why it is not faster than vanilla
    assert last["summary"].startswith("**Self-SD on a CPU is slower than vanilla on short clips.**")


def test_self_sd_on_a_cpu_says_why_it_runs_slower(tmp_path):
    from specvlm import assets
    from specvlm.models.presets import BUNDLED_DRAFT, BUNDLED_TARGET
    clip = str(sorted(assets.path("videos").glob("*.mp4"))[0])
    assert run_caveat(str(BUNDLED_TARGET), None, clip, "cpu") == SELF_SD_CPU_CAVEAT
    assert "reads all of its weights" in SELF_SD_CPU_CAVEAT
    assert run_caveat(str(BUNDLED_TARGET), str(BUNDLED_DRAFT), clip, "cpu") == ""      # Std-SD
    assert run_caveat(str(BUNDLED_TARGET), None, clip, "cuda") == ""                   # a GPU preset says its own
    assert run_caveat("org/model", None, clip, "cpu") == SELF_SD_CPU_CAVEAT
    real = tmp_path / "earth.mp4"
    real.write_bytes(b"\x00" * 4096)
    both = run_caveat(str(BUNDLED_TARGET), None, str(real), "cpu").split("\n\n")
    assert both == [synthetic_caveat(str(BUNDLED_TARGET), str(real)), SELF_SD_CPU_CAVEAT] and both[0]


def test_loading_a_model_says_so_once(tmp_path):
    video = tmp_path / "clip.mp4"
    video.write_bytes(b"\x00" * 64)
    backend = Backend(FakeEngine(step_s=0.0))
    seen: list[str] = []
    ups = list(backend.run(RunRequest(video=str(video), settings=RunSettings(custom_model="org/model")),
                           progress=lambda f, d: seen.append(d)))
    assert ups[0]["status"] == "Starting…"
    assert ups[1]["status"].startswith("Downloading (first time only) and loading model **org/model**")
    assert seen[0] == "Downloading (first time only) and loading model org/model"
    ups = list(backend.run(RunRequest(video=str(video), settings=RunSettings(custom_model="org/model"))))
    assert not any("loading model" in str(u.get("status", "")) for u in ups)  # cached: no load step
