"""App-engine fakes shared by several test modules: the real facade with one behaviour changed (no loading,
recorded runs, a fixed logit margin, a generated clip, an out-of-memory stream, the real probe over fake streams)."""
from __future__ import annotations

import weakref
from types import SimpleNamespace

import torch

from helpers.engines import TINY, IOEngine
from helpers.fakes import FakeEngine
from helpers.media import make_clip

from app.runs.facade import SpecvlmFacade


class NoLoadEngine(SpecvlmFacade):
    """The real facade (presets, Hub answer, local cache) that fails the test if it loads a model."""

    def load_pair(self, *a, **k):
        raise AssertionError("no model may be loaded for a refused Run")


class RecordingEngine(SpecvlmFacade):
    """The real engine over the session's tiny Qwen2.5-VL, keeping every run's events and clip."""

    def __init__(self, pair):
        super().__init__(video_timeout_s=20.0)
        self.pair = pair
        self.runs: dict[str, list] = {}
        self.clips: list = []

    def presets(self):
        return {TINY: SimpleNamespace(name=TINY, target="tiny", draft=None, description="random tiny Qwen2.5-VL",
                                      num_frames=8, requires_cuda=False, max_new_tokens=10)}

    def default_preset(self):
        return TINY

    def load_pair(self, target, draft, device, dtype):
        return self.pair

    def load_video(self, path, config, **kw):
        clip = super().load_video(path, config, **kw)
        self.clips.append(clip)
        return clip

    def stream(self, pair, inputs, config, should_stop):
        events = self.runs.setdefault(config.method, [])
        events.clear()
        for ev in super().stream(pair, inputs, config, should_stop):
            events.append(ev)
            yield ev


class MarginEngine(FakeEngine):
    """Vanilla events carry the target's top-1 minus top-2 logit margin (``margin`` per token)."""

    def __init__(self, margin, **kw):
        super().__init__(**kw)
        self.margin = margin

    def stream(self, pair, inputs, config, should_stop):
        import dataclasses
        for ev in super().stream(pair, inputs, config, should_stop):
            yield dataclasses.replace(ev, margin=self.margin) if config.method == "vanilla" and hasattr(ev, "step") \
                else ev


class ClipEngine(SpecvlmFacade):
    """The real engine reading a generated clip instead of a file."""

    def load_video(self, path, config, should_stop=None):
        return make_clip(num_frames=8, side=112)


class OOMEngine(IOEngine):
    """The first stream allocates a 'KV cache' and then runs out of memory."""

    def __init__(self):
        super().__init__()
        self.cache_ref = None
        self.failed = False

    def stream(self, pair, inputs, config, should_stop):
        if self.failed:
            return super().stream(pair, inputs, config, should_stop)
        return self._boom()

    def _boom(self):
        kv = torch.zeros(1 << 20)  # 4 MB stands for the KV cache of the failing step
        self.cache_ref = weakref.ref(kv)
        self.failed = True
        yield from ()
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


class ProbingFake(FakeEngine):
    """The fake token streams, with the real probe (duration limit)."""

    video_timeout_s = 10.0
    probe_video = SpecvlmFacade.probe_video
