"""Offline (the tests run with ``HF_HUB_OFFLINE=1``): the page says the Hub cannot be reached, presets whose
models would have to download say so before Run, and Run refuses them in one line without touching a model."""
from __future__ import annotations

from helpers.app_fakes import NoLoadEngine

import pytest

from app.inputs.model_messages import HUB_UNREACHABLE, synthetic_caveat
from app.inputs.settings import RunRequest, RunSettings
from app.runs.backend import Backend

SMOL = "SmolVLM2-500M + 256M draft (CPU)"


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_the_page_says_the_hub_is_unreachable_and_which_presets_need_it():
    b = Backend(NoLoadEngine())
    assert b.hub_note() == HUB_UNREACHABLE
    assert "needs the Hugging Face Hub, which this server cannot reach" in b.preset_info(SMOL)[0]
    assert "cannot reach" not in b.preset_info("Bundled tiny (CPU, Std-SD)")[0]   # local folders: fine
    from app.page.ui import build_demo
    c = build_demo(b, examples=[]).specvlm_components
    assert HUB_UNREACHABLE in c["hub_md"].value


@pytest.mark.parametrize("settings,what", [
    (dict(preset=SMOL), f"Preset {SMOL!r}"),
    (dict(custom_model="someone/some-vlm"), "This custom model"),
])
def test_a_run_that_needs_the_hub_is_refused_in_one_line(settings, what):
    from specvlm import assets
    video = assets.path("videos") / "shapes_short.mp4"
    ups = list(Backend(NoLoadEngine()).run(RunRequest(str(video), "Describe.", RunSettings(**settings))))
    err = ups[-1]["error"]
    assert err.startswith(f"{what} needs '") and "from the Hugging Face Hub, which this server cannot reach" in err
    assert "\n" not in err and "OSError" not in err


def test_the_bundled_model_caveat_does_not_send_an_offline_user_to_the_hub(tmp_path):
    from specvlm.models.presets import BUNDLED_TARGET
    video = tmp_path / "earth.mp4"
    video.write_bytes(b"\x00" * 64)
    online = synthetic_caveat(str(BUNDLED_TARGET), str(video))
    offline = synthetic_caveat(str(BUNDLED_TARGET), str(video), hub_ok=False)
    assert "downloads from the Hub" in online and "downloads from the Hub" not in offline
    assert "this one cannot" in offline
