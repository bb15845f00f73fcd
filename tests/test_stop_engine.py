"""Stop inside the long phases: the video reader stops between chunks of frames and the prefill between
layers (``should_stop``), so a Stop ends the work itself, not only the page's view of it."""
from __future__ import annotations

import threading
import time

import pytest
import torch

from helpers.media import make_clip

from specvlm.config import DecodeConfig, VideoConfig
from specvlm.engine.prepare import prepare
from specvlm.models.stopping import install_stop_checks, stop_between_layers
from specvlm.engine.stream import generate, stream
from specvlm.types import PrefillInfo, Stopped
from specvlm.video import backends, load_video

PROMPT = "describe this video in detail"


def _layer_calls(model) -> list[int]:
    """Counts forwards of the layers held in the model's ModuleLists (a forward pre-hook each)."""
    count = [0]
    for mod in model.modules():
        if isinstance(mod, torch.nn.ModuleList):
            for layer in mod:
                layer.register_forward_pre_hook(lambda *_: count.__setitem__(0, count[0] + 1))
    return count


@pytest.mark.parametrize("method", ["vanilla", "specvlm"])
def test_a_stop_during_the_prefill_ends_it_between_layers(method):
    from specvlm.models.pair import pair_from_models
    from specvlm.testing.tiny import tiny_qwen2_5_vl
    pair = pair_from_models(*tiny_qwen2_5_vl(layers=4))
    clip, cfg = make_clip(16), DecodeConfig(method=method, max_new_tokens=8)
    full = _layer_calls(pair.target)
    layers = [m for mod in pair.target.modules() if isinstance(mod, torch.nn.ModuleList) for m in mod]
    hooks = [len(m._forward_pre_hooks) for m in layers]
    list(stream(pair, prepare(pair, clip, PROMPT), cfg))  # a whole run: prefill + 8 steps
    per_run = full[0]
    full[0] = 0
    checks = []
    stop = lambda: checks.append(1) or len(checks) > 3  # noqa: E731  True at the 4th check: inside the prefill
    inputs = prepare(pair, clip, PROMPT)
    assert list(stream(pair, inputs, cfg, should_stop=stop)) == []  # no PrefillInfo: it never finished
    assert 0 < full[0] < per_run // 2    # a few layers ran, then the prefill ended
    assert [len(m._forward_pre_hooks) for m in layers] == hooks  # a request adds nothing to the shared models


@pytest.mark.parametrize("method", ["vanilla", "specvlm"])
def test_the_language_model_stops_between_layers_without_module_hooks(method):
    """Decoder layers carry no hook (a decode step takes PyTorch's plain module path); the engine's
    attention checks instead, so a stop that comes once the vision encoder is done still ends the
    prefill at the next decoder layer."""
    from specvlm.models.pair import pair_from_models
    from specvlm.testing.tiny import tiny_qwen2_5_vl
    pair = pair_from_models(*tiny_qwen2_5_vl(layers=4))
    layers = pair.adapter.language_model(pair.target).layers
    assert all(not m._forward_pre_hooks for m in pair.adapter.language_model(pair.target).modules())
    reached, last = [], [0]
    layers[1].register_forward_pre_hook(lambda *_: reached.append(1))
    layers[3].register_forward_pre_hook(lambda *_: last.__setitem__(0, last[0] + 1))
    events = list(stream(pair, prepare(pair, make_clip(16), PROMPT), DecodeConfig(method=method, max_new_tokens=4),
                         should_stop=lambda: bool(reached)))
    assert events == [] and reached and last[0] == 0   # stopped in decoder layer 1: layers 2-3 never ran


def test_stop_checks_leave_the_output_unchanged():
    from specvlm.models.pair import pair_from_models
    from specvlm.testing.tiny import tiny_qwen2_5_vl
    pair = pair_from_models(*tiny_qwen2_5_vl())
    clip, cfg = make_clip(8), DecodeConfig(method="specvlm", max_new_tokens=16, stop_at_eos=False)
    plain = generate(pair, prepare(pair, clip, PROMPT), cfg).token_ids
    checked = [ev for ev in stream(pair, prepare(pair, clip, PROMPT), cfg, should_stop=lambda: False)]
    assert isinstance(checked[0], PrefillInfo)
    assert [t for ev in checked[1:] for t in ev.token_ids] == plain


def test_stop_checks_act_only_in_the_thread_that_asked():
    layer = torch.nn.ModuleList([torch.nn.Linear(2, 2)])
    model = torch.nn.Sequential(*layer)
    install_stop_checks(layer)
    install_stop_checks(layer)  # once per module
    assert len(layer[0]._forward_pre_hooks) == 1
    flag = threading.Event()
    with pytest.raises(Stopped):
        with stop_between_layers(flag.is_set):
            model(torch.zeros(1, 2))  # not stopped yet
            other: list[BaseException] = []
            flag.set()
            t = threading.Thread(target=lambda: _run_catching(model, other))
            t.start()
            t.join()
            assert other == []   # another thread's forward on the same model is not stopped
            model(torch.zeros(1, 2))  # this thread's is
    flag.set()
    model(torch.zeros(1, 2))  # outside the block the check is inert


def _run_catching(model, errors):
    try:
        model(torch.zeros(1, 2))
    except BaseException as e:  # noqa: BLE001 - recorded for the assertion
        errors.append(e)


def test_a_stop_while_reading_the_video_ends_the_decoder_between_chunks(monkeypatch, tmp_path):
    from gradio.media import get_video
    path = get_video("world.mp4")  # 30 s, 480x270
    chunks, real = [], backends._decord_chunk
    first_chunk = threading.Event()

    def counting(vr, chunk, cancel, p):
        out = real(vr, chunk, cancel, p)
        chunks.append(len(chunk))
        first_chunk.set()
        return out

    monkeypatch.setattr(backends, "_decord_chunk", counting)
    with pytest.raises(Stopped):
        load_video(path, VideoConfig(num_frames=128, max_frames=128), should_stop=first_chunk.is_set)
    assert 1 <= len(chunks) < 128 // backends.DECORD_CHUNK   # it stopped after a chunk, not at the end
    assert not [t for t in threading.enumerate() if t.name == "specvlm-video-decode" and t.is_alive()]
    clip = load_video(path, VideoConfig(num_frames=128, max_frames=128), should_stop=lambda: False)
    assert len(clip.frames) == 128 and sum(chunks[-(128 // backends.DECORD_CHUNK):]) == 128  # whole, in chunks


def test_stop_during_a_long_prefill_of_the_bundled_model_through_the_app():
    """The app over the real engine: 256 frames of world.mp4 make a prefill of ~16k video tokens; Stop 1 s into
    it ends the Run as stopped before the prefill produced anything, and leaves no thread behind."""
    from gradio.media import get_video

    from app.inputs.settings import RunRequest, RunSettings
    from app.runs.backend import Backend
    from app.runs.facade import SpecvlmFacade
    from specvlm.models.presets import default_preset_name
    produced, started = [], threading.Event()

    class Recording(SpecvlmFacade):   # what the engine itself produced, whether or not the page saw it
        def stream(self, *a, **k):
            started.set()
            for ev in super().stream(*a, **k):
                produced.append(ev)
                yield ev

    backend = Backend(Recording(), device="cpu", dtype="float32", update_interval_s=0.05)
    settings = RunSettings(preset=default_preset_name(), num_frames=256, max_new_tokens=16)
    views: list = []

    def stop_in_the_prefill():
        started.wait(120)
        time.sleep(1.0)   # preparing the inputs and the prefill of ~16k tokens take several seconds here
        backend.stop("s")

    stopper = threading.Thread(target=stop_in_the_prefill, daemon=True)
    stopper.start()
    ups = list(backend.run(RunRequest(get_video("world.mp4"), "", settings), session="s", views=views))
    stopper.join()
    assert started.is_set(), "the vanilla run never started"
    assert views[0].stopped and ups[-1]["status"].startswith("**Stopped.**")
    assert produced == []       # the prefill itself ended early: no PrefillInfo was produced
    assert not backend.active_workers()
