"""App engines for the tests: the real app engine over the fake token stream (real probe, decoding, loading
errors), or over a tiny random Qwen2.5-VL; and a backend run to its last update."""
from __future__ import annotations

from types import SimpleNamespace

from helpers.fakes import FakeEngine

from app.inputs.settings import RunRequest, RunSettings
from app.runs.facade import SpecvlmFacade


TINY = "Tiny (in-process)"


class TinyEngine(SpecvlmFacade):
    """The real engine (probe, decode, stream) over one shared tiny Qwen2.5-VL."""

    def presets(self):
        return {TINY: SimpleNamespace(name=TINY, target="tiny", draft=None, description="random tiny Qwen2.5-VL",
                                      num_frames=4, requires_cuda=False, max_new_tokens=12)}

    def default_preset(self):
        return TINY

    def load_pair(self, target, draft, device, dtype):
        from specvlm.models.pair import pair_from_models
        from specvlm.testing.tiny import tiny_qwen2_5_vl
        model, processor = tiny_qwen2_5_vl()
        return pair_from_models(model, processor, name="tiny")


class IOEngine(SpecvlmFacade):
    """Real probe / decode / subtitles / model-loading errors / OOM handling; fake token stream."""

    def __init__(self, fake: FakeEngine | None = None, video_timeout_s: float = 20.0):
        super().__init__(video_timeout_s=video_timeout_s)
        self.fake = fake or FakeEngine(step_s=0.0)
        self.prompts: list[str] = []
        self.clips: list = []

    def presets(self):
        return self.fake.presets()

    def default_preset(self):
        return self.fake.default_preset()

    def cuda_available(self):
        return False

    def model_available(self, model):
        return model.startswith("fake/") or super().model_available(model)

    def load_pair(self, target, draft, device, dtype):
        if target.startswith("fake/"):
            return self.fake.load_pair(target, draft, device, dtype)
        return super().load_pair(target, draft, device, dtype)  # the real loader (error cases only)

    def prepare(self, pair, clip, prompt, **kw):
        self.prompts.append(prompt)
        self.clips.append(clip)
        return self.fake.prepare(pair, clip, prompt, **kw)

    def stream(self, pair, inputs, config, should_stop):
        return self.fake.stream(pair, inputs, config, should_stop)


def fake_settings(**kw):
    """The settings of a short Run on the fake engine's tiny preset (``kw`` overrides)."""
    return RunSettings(**{**dict(preset="Fake tiny (CPU)", num_frames=4, max_new_tokens=12), **kw})


def run_to_end(backend, video, prompt="Describe.", session="s", **kw):
    """Run ``video`` through ``backend`` to its end; returns the last update (``kw``: :func:`fake_settings`)."""
    ups = list(backend.run(RunRequest(str(video) if video else video, prompt, fake_settings(**kw)), session=session))
    return ups[-1]
