"""A fake ``specvlm`` engine for the app tests (no model, no video decoding), and the app tests' small helpers."""
from __future__ import annotations

import socket
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from specvlm.config import CPU_MAX_NEW_TOKENS, TreeConfig
from specvlm.types import PrefillInfo, PruneResult, StepEvent, VideoClip


ROOT = Path(__file__).resolve().parents[2]
FAKE_WORDS = ["the", " video", " shows", " a", " red", " ball", " moving", " left", " to", " right", ".",
              " It", " bounces", " twice", " on", " grey", " floor", "\n"]
GRID = (2, 4, 4)  # frame groups, rows, cols -> V = 32 video tokens
STAGE1 = [0, 5, 10]
STAGE2 = [3, 17, 30]
FORCED = [20, 21, 24, 25]  # "on-screen text" tokens the fake reports as forced when given a ground truth


class FakeVideoError(ValueError):
    """Like specvlm.video.VideoError."""


class FakeStopped(Exception):
    """What the fake video reader raises when told to stop."""


class FakeTokenizer:
    """ids -> text over FAKE_WORDS; id 99 is an EOS-like special token that decodes to ''."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(FAKE_WORDS[i % len(FAKE_WORDS)] for i in ids if i != 99)


class TickClock:
    """A clock for :class:`FakeEngine` that moves ``tick_s`` seconds each time it is read (no wall clock)."""

    def __init__(self, tick_s: float):
        self.tick_s, self.now = tick_s, 0.0

    def __call__(self) -> float:
        self.now += self.tick_s
        return self.now


class FakeEngine:
    """An :class:`app.runs.facade.Facade` with deterministic token streams (keeps no run record).

    Args:
        step_s: sleep per vanilla token (the speculative run sleeps the same per verify step).
        spec_tokens: override the speculative run's tokens (to simulate a divergence).
        fail_load: raise from load_pair.
        frame_s: seconds per frame while reading the video (polls ``should_stop`` between frames,
            like the real reader; a stop raises :class:`FakeStopped`).
        prefill_s: seconds of prefill, in 10 "layers" that poll ``should_stop`` (a stop ends the
            stream before its PrefillInfo, like the real engine).
        eos_at: the token count at which the runs emit EOS unless ``config.stop_at_eos`` is False.
        stop_lag_s: seconds the prefill still takes once told to stop (a slow layer finishing).
        clock: what the steps' ``elapsed_s`` is read from (``time.perf_counter``; a :class:`TickClock` for
            decode times that do not depend on the machine).

    Attributes:
        ended: how each stream ended, in order: "done", "stopped" (its ``should_stop`` returned True) or
            "closed" (its consumer closed it).
    """

    def __init__(self, step_s: float = 0.002, spec_tokens: list[int] | None = None, fail_load: bool = False,
                 frame_s: float = 0.0, prefill_s: float = 0.0, eos_at: int | None = None, stop_lag_s: float = 0.0,
                 clock=time.perf_counter):
        self.step_s = step_s
        self.spec_tokens = spec_tokens
        self.fail_load = fail_load
        self.frame_s, self.prefill_s, self.eos_at, self.stop_lag_s = frame_s, prefill_s, eos_at, stop_lag_s
        self.clock = clock
        self.frames_read = 0
        self.prefill_layers = 0
        self.loads = 0
        self.stop_polls = 0
        self.ended: list[str] = []   # per stream, how it ended: "done", "stopped" (should_stop) or "closed"
        self.streams: list[str] = []
        self.prepare_kwargs: list[dict] = []  # per prepare call: the subtitles / subtitle_mode / truth given

    def presets(self):
        mk = lambda n, t, d, cuda, **kw: SimpleNamespace(name=n, target=t, draft=d, description=f"{n} (fake)",
                                                          num_frames=4, requires_cuda=cuda,
                                                          max_new_tokens=CPU_MAX_NEW_TOKENS, **kw)
        return {"Fake tiny (CPU)": mk("Fake tiny (CPU)", "fake/target", "fake/draft", False),
                "Fake big (GPU)": mk("Fake big (GPU)", "fake/big", None, True,
                                     tree=TreeConfig(shape="chain", depth=9, min_prob=0.05)),
                "Fake missing": mk("Fake missing", "/nonexistent/specvlm/model", None, False)}

    def default_preset(self):
        return "Fake tiny (CPU)"

    def cuda_available(self):
        return False

    def hub_reachable(self):
        return True

    def model_available(self, model):
        return True

    def probe_video(self, path):
        return SimpleNamespace(duration=0.0)   # the fake reader finds out while reading (``.bad``)

    def is_oom(self, exc):
        return isinstance(exc, MemoryError)

    def free_memory(self):
        pass

    def make_record(self, events, config, prompt, pair, clip):
        return None

    def explain(self, record, pair, inputs, *, cues=(), subtitle_mode="both", should_stop=None):
        return record

    def load_pair(self, target, draft, device, dtype):
        if self.fail_load:
            raise OSError(f"{target} is not a local folder and the Hub is unreachable")
        self.loads += 1
        return SimpleNamespace(name=target, processor=SimpleNamespace(tokenizer=FakeTokenizer()),
                               frames_per_token=2, family="qwen2_5_vl", self_sd=draft is None)

    def load_video(self, path, config, should_stop=None):
        if str(path).endswith(".bad"):
            raise FakeVideoError(f"{path}: no video stream found")
        t = max(4, config.num_frames)
        frame_s = self.frame_s  # this call's timing, even if a test changes it meanwhile
        for _ in range(t if frame_s else 0):
            if should_stop is not None and should_stop():
                raise FakeStopped("video reading stopped")
            time.sleep(frame_s)
            self.frames_read += 1
        frames = np.full((t, 32, 32, 3), 128, np.uint8)
        return VideoClip(frames=frames, timestamps=np.arange(t) * 0.5, path=str(path), native_fps=2.0,
                         total_frames=t, duration=t / 2)

    def load_srt(self, path):
        if str(path).endswith(".bad.srt"):
            raise ValueError("line 1: not a cue number")
        if str(path).endswith(".late.srt"):   # a transcript that starts after the clip ends
            return [SimpleNamespace(start_s=3600.0, end_s=3602.0, text="much later")]
        return [SimpleNamespace(start_s=1.0, end_s=2.5, text="Hello there")]

    def tokens(self, n):
        return [(i * 7 + 3) % len(FAKE_WORDS) for i in range(n)]

    def prepare(self, pair, clip, prompt, *, subtitles=(), subtitle_mode="both", truth=None):
        kw = dict(subtitles=list(subtitles), subtitle_mode=subtitle_mode) if subtitles else {}
        kw |= {"truth": truth} if truth is not None else {}
        self.prepare_kwargs.append(kw)
        return SimpleNamespace(clip=clip, prompt=prompt, **kw)

    def stream(self, pair, inputs, config, should_stop):
        self.streams.append(config.method)
        kw = vars(inputs) if inputs is not None else {}
        n = config.max_new_tokens
        if self.eos_at is not None and getattr(config, "stop_at_eos", True):
            n = min(n, self.eos_at)
        spec = config.method != "vanilla"
        ids = list(self.spec_tokens) if (spec and self.spec_tokens is not None) else self.tokens(n)
        outcome = "closed"
        try:
            outcome = yield from self._steps(spec, ids, should_stop, kw)
        finally:
            self.ended.append(outcome)

    def _steps(self, spec, ids, should_stop, kw):
        """The stream's events; returns "stopped" when ``should_stop`` ended it, else "done"."""
        prefill_s, step_s, lag_s = self.prefill_s, self.step_s, self.stop_lag_s  # this call's timings
        for _ in range(10 if prefill_s else 0):  # prefill "layers"
            if should_stop():
                time.sleep(lag_s)
                return "stopped"
            time.sleep(prefill_s / 10)
            self.prefill_layers += 1
        yield prefill_info(spec, forced=FORCED if (spec and kw.get("truth")) else None)
        tok = FakeTokenizer()
        t0, i, step = self.clock(), 0, 0
        pattern = [3, 1, 0, 4, 2]
        while i < len(ids):
            if step > 0:
                self.stop_polls += 1
                if should_stop():
                    return "stopped"
                time.sleep(step_s)
            k = 1 if (not spec or step == 0) else pattern[step % len(pattern)] + 1
            chunk = ids[i:i + k]
            flags = [j < len(chunk) - 1 for j in range(len(chunk))] if spec and step > 0 else [False] * len(chunk)
            i += len(chunk)
            yield StepEvent(step=step, token_ids=chunk, accept_length=sum(flags), from_draft=flags,
                            text=tok.decode(chunk), elapsed_s=self.clock() - t0, num_generated=i,
                            pieces=[tok.decode([t]) for t in chunk])
            step += 1
        return "done"


def prefill_info(spec: bool, forced: list[int] | None = None) -> PrefillInfo:
    """A PrefillInfo over GRID with STAGE1/STAGE2 kept (spec) or no pruning (vanilla); ``forced``
    tokens are kept too and reported as forced."""
    g, h, w = GRID
    grid = torch.tensor([[f, r, c] for f in range(g) for r in range(h) for c in range(w)], dtype=torch.int64)
    v = g * h * w
    prune = None
    if spec:
        s1, s2 = torch.tensor(STAGE1), torch.tensor(STAGE2)
        f = None if forced is None else torch.tensor(forced, dtype=torch.int64)
        parts = [s1, s2] + ([f] if f is not None else [])
        prune = PruneResult(keep=torch.sort(torch.cat(parts)).values, stage1=s1, stage2=s2,
                            scores=torch.linspace(0, 1, v), num_video_tokens=v, method="specvlm", forced=f)
    return PrefillInfo(num_prompt_tokens=v + 20, num_video_tokens=v, num_draft_prompt_tokens=26, prune=prune,
                       prefill_s=0.01, prune_s=0.001, draft_prefill_s=0.002, token_grid=grid, frames_per_token=2)


def free_port() -> int:
    """A free local TCP port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sample_video() -> Path:
    """The smallest committed example clip (assets/videos/*.mp4)."""
    vids = sorted((ROOT / "assets" / "videos").glob("*.mp4"))
    assert vids, "assets/videos/*.mp4 are committed with the repository"
    return min(vids, key=lambda p: p.stat().st_size)


def real_engine(bundled: bool = False):
    """(engine, preset name): the app's real engine with the bundled Std-SD preset, over random stand-ins of the
    bundled pair with its tokenizer and processor (:func:`helpers.bundled_like.stand_in_engine`: for tests of the
    app's mechanics), or with ``bundled`` over the pair committed in assets/model."""
    from app.runs.facade import SpecvlmFacade
    from helpers.bundled_like import stand_in_engine
    from specvlm.models.presets import BUNDLED_STD, PRESETS

    assert Path(PRESETS[BUNDLED_STD].target).exists(), "the bundled pair is committed in assets/model"
    return (SpecvlmFacade() if bundled else stand_in_engine()), BUNDLED_STD


class ProbingEngine(FakeEngine):
    """The fake decoder with the real probe (the page decides on a preview from the real codec) and a
    record of the files the runs read."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.read: list[str] = []

    def probe_video(self, path):
        from app.runs.facade import SpecvlmFacade
        return SpecvlmFacade().probe_video(path)

    def load_video(self, path, config, **kw):
        self.read.append(str(path))
        return super().load_video(path, config, **kw)


def stream_endings(eng: FakeEngine, timeout_s: float = 30.0) -> list[str]:
    """How ``eng``'s streams ended ("done", "stopped", "closed"), once the first one has (the app's worker runs
    the stream on its own thread)."""
    deadline = time.monotonic() + timeout_s
    while not eng.ended and time.monotonic() < deadline:
        time.sleep(0.01)
    return eng.ended
