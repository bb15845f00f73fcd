"""Library API inputs a fresh user gets wrong: a video path instead of a VideoClip, a clip where prepared
inputs belong, a string where DecodeConfig wants a nested config, and narrow videos that must reach the
models enlarged."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers.media import frame_ids, write_video

from specvlm.config import ConfigError, DecodeConfig, PruneConfig, VideoConfig
from specvlm.engine.stream import generate, stream
from specvlm.types import PrefillInfo
from specvlm.video import VideoError, load_video
from specvlm.engine.prepare import prepare

pytestmark = pytest.mark.timeout(120)

CFG = DecodeConfig(method="specvlm", max_new_tokens=4, stop_at_eos=False)


@pytest.mark.parametrize("name,cls", [("prune", "PruneConfig"), ("tree", "TreeConfig"),
                                      ("sampling", "SamplingConfig")])
def test_nested_decode_settings_must_be_configs(name, cls):
    with pytest.raises(ConfigError, match=rf"^{name}='specvlm' is not a {cls}: pass {name}={cls}\("):
        DecodeConfig(**{name: "specvlm"})


def test_prune_string_points_to_method():
    with pytest.raises(ConfigError, match=r"DecodeConfig\(method='random'\)"):
        DecodeConfig(prune="random")
    assert DecodeConfig(method="random", prune=PruneConfig(drop_rate=0.5)).prune.method == "random"


@pytest.fixture(scope="module")
def ramp(tmp_path_factory):
    return write_video(tmp_path_factory.mktemp("api") / "ramp.mp4", n=20, w=64, h=48)


@pytest.mark.parametrize("fam", ["qwen", "llava"])
def test_prepare_accepts_a_path(pairs, ramp, fam):
    pair = pairs[(fam, "self")]
    clip = load_video(ramp, VideoConfig(even_frames=pair.frames_per_token == 2))
    want = generate(pair, prepare(pair, clip, "describe"), CFG).token_ids
    assert generate(pair, prepare(pair, ramp, "describe"), CFG).token_ids == want
    events = list(stream(pair, prepare(pair, Path(ramp), "describe"), CFG))
    assert isinstance(events[0], PrefillInfo) and [t for e in events[1:] for t in e.token_ids] == want


def test_bad_video_arguments_raise_clear_errors(pairs, tmp_path):
    pair = pairs[("qwen", "self")]
    with pytest.raises(TypeError, match=r"VideoClip or a video file path, got int.*load_video\(path\)"):
        prepare(pair, 3, "describe")
    with pytest.raises(TypeError, match="got NoneType"):
        prepare(pair, None, "describe")
    with pytest.raises(VideoError, match="no such file"):
        prepare(pair, str(tmp_path / "nope.mp4"), "describe")


def test_stream_and_generate_take_prepared_inputs_only(pairs, ramp):
    pair = pairs[("qwen", "self")]
    for bad in (ramp, load_video(ramp)):
        with pytest.raises(TypeError, match=r"prepared ModelInputs, got (str|VideoClip).*specvlm.prepare\(pair"):
            generate(pair, bad, CFG)
        with pytest.raises(TypeError, match="prepared ModelInputs"):
            next(stream(pair, bad, CFG))
    with pytest.raises(TypeError, match="positional"):
        generate(pair, prepare(pair, ramp, "describe"), CFG, None)


@pytest.mark.parametrize("fam", ["qwen", "llava"])
@pytest.mark.parametrize("w,h", [(16, 64), (16, 2000), (16, 4000)])
def test_narrow_video_files_reach_the_models(pairs, tmp_path, fam, w, h):
    """Qwen2.5-VL used to reject these: "frames of 16x64 px are too small" (sides < 28 px)."""
    path = write_video(tmp_path / f"n{w}x{h}.mp4", n=4, w=w, h=h)
    pair = pairs[(fam, "self")]
    clip = load_video(path, VideoConfig(num_frames=4, even_frames=True))
    assert frame_ids(clip.frames) == [0, 1, 2, 3]
    inputs = pair.adapter.prepare(pair.processor, pair.target, clip, "describe")
    assert inputs.video_index.numel() > 0
    assert len(generate(pair, prepare(pair, path, "describe"), CFG).token_ids) == 4
