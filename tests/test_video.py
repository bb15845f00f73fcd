"""Tests for specvlm.video: sampling, decord/PyAV decoding, typed errors.

Every video is written by the tests into a temporary directory with PyAV.
Frame i of the "ramp" videos is a flat grey of brightness 8 * i, so a decoded
frame's mean tells which frame it is.
"""
from __future__ import annotations

import subprocess
import threading

import av
import numpy as np
import pytest

from helpers.media import (frame_ids, marker_frame, palette_frame, ramp_frame, write_audio_only, write_png,
                           write_video)

from specvlm.config import VideoConfig
from specvlm.video import (
    VideoDecodeError,
    VideoError,
    VideoFormatError,
    VideoInfo,
    MAX_ASPECT,
    MIN_SIDE,
    VideoTimeoutError,
    ensure_min_side,
    frames_to_clip,
    load_video,
    probe_video,
    sample_indices,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def vids(tmp_path_factory):
    d = tmp_path_factory.mktemp("videos")
    return {
        "h264": write_video(d / "ramp.mp4"),
        "vp9": write_video(d / "ramp.webm", codec="libvpx-vp9"),
    }


# ----------------------------------------------------------------------------- sample_indices


def test_sample_by_count_is_rounded_linspace():
    idx = sample_indices(100, num_frames=5)
    assert idx.dtype == np.int64
    assert idx.tolist() == [0, 25, 50, 74, 99]


def test_sample_capped_at_real_count_and_max_frames():
    assert sample_indices(5, num_frames=16).tolist() == [0, 1, 2, 3, 4]
    idx = sample_indices(1000, num_frames=500, max_frames=8)
    assert len(idx) == 8 and idx[0] == 0 and idx[-1] == 999
    assert sample_indices(7).tolist() == list(range(7))  # neither count nor fps: all frames


def test_sample_by_fps():
    idx = sample_indices(300, fps=2.0, native_fps=30.0)  # 10 s at 2 fps: every 15th frame
    assert idx.tolist() == list(range(0, 300, 15))
    assert sample_indices(3, fps=1.0, native_fps=30.0).tolist() == [0]  # 0.1 s clip: at least one frame
    capped = sample_indices(300, fps=30.0, native_fps=30.0, max_frames=16)  # capped: spread over the clip
    assert len(capped) == 16 and capped[0] == 0 and capped[-1] == 299


def test_sample_even_rounding():
    assert len(sample_indices(100, num_frames=7, even=True)) == 6
    assert sample_indices(10, num_frames=1, even=True).tolist() == [0, 9]
    assert sample_indices(1, num_frames=8, even=True).tolist() == [0, 0]  # single frame duplicated
    assert sample_indices(10, num_frames=5, max_frames=1, even=True).tolist() == [0, 0]
    assert len(sample_indices(3, num_frames=16, even=True)) == 2


def test_sample_with_vfr_timestamps_is_uniform_in_time():
    ts = np.array([0.0, 0.1, 0.2, 0.3, 5.0, 5.1, 9.8, 9.9, 10.0])
    idx = sample_indices(len(ts), num_frames=3, timestamps=ts)
    assert idx.tolist() == [0, 4, 8]  # targets 0, 5, 10 s (index linspace would give 0, 4, 8 too)
    idx = sample_indices(len(ts), num_frames=5, timestamps=ts)  # targets 0, 2.5, 5, 7.5, 10
    assert np.all(np.diff(idx) > 0) and idx[0] == 0 and idx[-1] == 8
    assert 4 in idx.tolist()
    assert len(sample_indices(len(ts), num_frames=9, timestamps=ts)) == 9  # collisions made unique
    # fps mode measures the clip from the timestamps (10 s span + one mean gap = 11.25 s)
    assert len(sample_indices(len(ts), fps=0.5, timestamps=ts)) == 5
    assert len(sample_indices(len(ts), fps=1.0, timestamps=ts)) == 9  # 11, capped at the real count


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(total_frames=0, num_frames=4),
        dict(total_frames=10, num_frames=0),
        dict(total_frames=10, fps=2.0),
        dict(total_frames=10, fps=-1.0, native_fps=30.0),
        dict(total_frames=10, num_frames=4, max_frames=0),
        dict(total_frames=10, num_frames=4, timestamps=np.zeros(3)),
    ],
)
def test_sample_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        sample_indices(**kwargs)


# ----------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("kind", ["h264", "vp9"])
def test_load_reads_right_frames_at_right_times(vids, kind):
    clip = load_video(vids[kind], VideoConfig(num_frames=5))
    assert clip.frames.dtype == np.uint8 and clip.frames.flags["C_CONTIGUOUS"]
    assert clip.frames.shape == (5, 48, 64, 3)
    expected = [0, 5, 10, 14, 19]  # round-half-up linspace(0, 19, 5)
    assert frame_ids(clip.frames) == expected
    np.testing.assert_allclose(clip.timestamps, np.array(expected) / 10.0, atol=1e-3)
    assert clip.timestamps.dtype == np.float64
    assert clip.total_frames == 20 and clip.native_fps == pytest.approx(10.0)
    assert clip.duration == pytest.approx(2.0, abs=0.05)
    assert clip.notes == []  # decord read it, nothing capped


def test_probe_reports_stream_facts(tmp_path, vids):
    info = probe_video(vids["h264"])
    assert isinstance(info, VideoInfo)
    assert (info.codec, info.width, info.height, info.rotation) == ("h264", 64, 48, 0)
    assert info.num_frames == 20 and not info.frames_estimated
    assert info.fps == pytest.approx(10.0) and info.duration == pytest.approx(2.0, abs=0.05)
    assert info.has_video and not info.has_audio and "mp4" in info.container
    webm = probe_video(vids["vp9"])
    assert webm.codec == "vp9" and webm.num_frames == 20  # counted from packets (no index in WebM)
    both = probe_video(write_video(tmp_path / "av.mp4", n=10, audio=True))
    assert both.has_video and both.has_audio


def test_fps_sampling_on_file(vids):
    clip = load_video(vids["h264"], VideoConfig(fps=5.0))
    assert len(clip.frames) == 10
    np.testing.assert_allclose(np.diff(clip.timestamps), 0.2, atol=0.051)
    assert frame_ids(clip.frames) == [int(round(t * 10)) for t in clip.timestamps]


def test_variable_frame_rate_timestamps_come_from_the_stream(tmp_path):
    pts = [0, 100, 200, 500, 600, 1000, 1100, 1150, 1200, 1800]
    path = write_video(tmp_path / "vfr.mp4", n=len(pts), pts_ms=pts)
    clip = load_video(path, VideoConfig(num_frames=64))
    assert clip.total_frames == 10
    np.testing.assert_allclose(clip.timestamps, np.array(pts) / 1000.0, atol=2e-3)
    assert frame_ids(clip.frames) == list(range(10))
    assert clip.duration >= 1.8
    # uniform in time: targets 0, 0.6, 1.2, 1.8 s -> frames at 0, 0.6, 1.2, 1.8 s
    clip4 = load_video(path, VideoConfig(num_frames=4))
    np.testing.assert_allclose(clip4.timestamps, [0.0, 0.6, 1.2, 1.8], atol=2e-3)
    assert frame_ids(clip4.frames) == [0, 4, 8, 9]


def _ffmpeg_first_frame_gray(path, w, h):
    """First frame as FFmpeg displays it (autorotate on), the reference for 'upright'."""
    import imageio_ffmpeg

    cmd = [imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-i", path, "-frames:v", "1"]
    cmd += ["-f", "rawvideo", "-pix_fmt", "gray", "-"]
    out = subprocess.run(cmd, capture_output=True, check=True, timeout=30).stdout
    return np.frombuffer(out, np.uint8).reshape(h, w)


@pytest.mark.parametrize("rotation,k", [(90, 1), (180, 2), (-90, 3)])
def test_rotation_metadata_gives_upright_frames(tmp_path, rotation, k):
    path = str(tmp_path / f"rot{k}.mp4")
    try:
        write_video(path, n=4, frame_fn=marker_frame, rotation=rotation)
    except (AttributeError, av.error.FFmpegError) as e:  # pragma: no cover - older PyAV
        pytest.skip(f"PyAV cannot write a display matrix here: {e}")
    info = probe_video(path)
    assert info.rotation == 90 * k
    clip = load_video(path, VideoConfig(num_frames=4))
    expected = np.rot90(marker_frame(0, 64, 48), k)
    assert clip.frames.shape[1:] == expected.shape
    got = clip.frames[0].mean(axis=2) > 128
    assert (got == (expected[..., 0] > 128)).mean() > 0.98
    ref = _ffmpeg_first_frame_gray(path, expected.shape[1], expected.shape[0]) > 128
    assert (got == ref).mean() > 0.98  # same orientation as ffmpeg's autorotate
    assert any("rotated" in n for n in clip.notes)


def test_gif_goes_through_pyav_fallback(tmp_path):
    path = write_video(tmp_path / "anim.gif", n=8, codec="gif", pix_fmt="rgb8", frame_fn=palette_frame)
    clip = load_video(path, VideoConfig(num_frames=8))
    assert clip.frames.shape == (8, 48, 64, 3)
    for i, f in enumerate(clip.frames):
        np.testing.assert_allclose(f.reshape(-1, 3).mean(0), palette_frame(i, 1, 1)[0, 0], atol=20)
    np.testing.assert_allclose(clip.timestamps, np.arange(8) / 10.0, atol=0.011)
    assert any("PyAV" in n for n in clip.notes)


def test_av1_goes_through_pyav_fallback(tmp_path):
    if "libsvtav1" not in av.codecs_available and "libaom-av1" not in av.codecs_available:
        pytest.skip("no AV1 encoder in this PyAV build")
    enc = "libsvtav1" if "libsvtav1" in av.codecs_available else "libaom-av1"
    path = write_video(tmp_path / "av1.mp4", n=10, codec=enc)
    assert probe_video(path).codec == "av1"
    clip = load_video(path, VideoConfig(num_frames=5))
    assert frame_ids(clip.frames) == [0, 2, 5, 7, 9]  # within codec error of 8 * i
    np.testing.assert_allclose(clip.timestamps, np.array([0, 2, 5, 7, 9]) / 10.0, atol=1e-3)


@pytest.mark.parametrize("w,h,pix", [(16, 16, "yuv420p"), (17, 15, "yuv444p"), (30, 18, "yuv420p")])
def test_tiny_and_odd_sizes(tmp_path, w, h, pix):
    path = write_video(tmp_path / f"s{w}x{h}.mp4", n=6, w=w, h=h, pix_fmt=pix)
    clip = load_video(path, VideoConfig(num_frames=6), min_side=None)  # as decoded, not enlarged
    assert clip.frames.shape == (6, h, w, 3)
    assert frame_ids(clip.frames) == list(range(6))


@pytest.mark.parametrize("w,h,out_w,out_h", [
    (16, 64, 32, 128),      # the fresh-user trial's w16.mp4
    (64, 16, 128, 32),
    (16, 2000, 32, 4000),   # x2, aspect kept: 128000 px and 125:1 fit the defaults
    (16, 4000, 32, 6272),   # x2 of 16x4000 would be 256000 px > max_pixels and 250:1: long side cut
])
def test_narrow_videos_are_enlarged_for_the_model(tmp_path, w, h, out_w, out_h):
    path = write_video(tmp_path / f"n{w}x{h}.mp4", n=4, w=w, h=h)
    cfg = VideoConfig(num_frames=4)
    clip = load_video(path, cfg)
    t, hh, ww, _ = clip.frames.shape
    assert (t, ww, hh) == (4, out_w, out_h)
    assert min(hh, ww) >= MIN_SIDE and max(hh, ww) <= MAX_ASPECT * min(hh, ww) and hh * ww <= cfg.max_pixels
    assert frame_ids(clip.frames) == [0, 1, 2, 3] and clip.frames.flags["C_CONTIGUOUS"]
    assert any(n.startswith("upscaled") for n in clip.notes)
    assert any(n.startswith("resized") for n in clip.notes) == (h == 4000)
    assert ensure_min_side(clip) is clip  # the app's extra call is a no-op
    raw = load_video(path, cfg, min_side=None)
    assert raw.frames.shape == (4, h, w, 3)


def test_min_side_enlarges_within_max_pixels_and_rejects_bad_values(tmp_path):
    path = write_video(tmp_path / "n20x1000.mp4", n=2, w=20, h=1000)
    clip = load_video(path, VideoConfig(num_frames=2, max_pixels=20 * 1000), min_side=56)
    assert clip.frames.shape == (2, 333, 60, 3)  # 20 px x3 = 60; long side cut to 111 so 60 x 333 <= 20000
    with pytest.raises(ValueError, match="min_side"):
        load_video(path, min_side=0)


def test_max_pixels_downscales_with_note(vids):
    clip = load_video(vids["h264"], VideoConfig(num_frames=4, max_pixels=32 * 24), min_side=None)
    assert clip.frames.shape == (4, 24, 32, 3)
    assert any("downscaled 64x48 -> 32x24" in n for n in clip.notes)
    assert frame_ids(clip.frames) == [0, 6, 13, 19]


def test_downscale_keeps_aspect_on_rotated_video(tmp_path):
    path = write_video(tmp_path / "rotbig.mp4", n=4, w=128, h=64, rotation=90)
    clip = load_video(path, VideoConfig(num_frames=2, max_pixels=32 * 16), min_side=None)
    t, hh, ww, _ = clip.frames.shape
    assert hh * ww <= 32 * 16 and hh == 2 * ww  # upright portrait, aspect kept


def test_max_frames_cap_and_even_notes(vids):
    clip = load_video(vids["h264"], VideoConfig(num_frames=12, max_frames=5, even_frames=True))
    assert len(clip.frames) == 4  # capped at 5, rounded down to even
    assert any("max_frames=5" in n for n in clip.notes)
    few = load_video(vids["h264"], VideoConfig(num_frames=64))
    assert len(few.frames) == 20 and any("only 20" in n for n in few.notes)


def test_single_frame_video_is_duplicated_for_even(tmp_path):
    path = write_video(tmp_path / "one.mp4", n=1, w=32, h=32)
    clip = load_video(path, VideoConfig(num_frames=4, even_frames=True))
    assert clip.frames.shape == (2, 32, 32, 3)
    assert clip.timestamps.tolist() == [0.0, 0.0]


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "make,words",
    [
        (lambda p: p.with_suffix(".txt").write_text("hello\nworld\n" * 50) and str(p.with_suffix(".txt")), "text"),
        (lambda p: p.write_bytes(np.random.default_rng(0).bytes(4096)) and str(p), "not a recognised"),
        (lambda p: p.write_bytes(b"") or str(p), "empty"),
        (lambda p: write_audio_only(p.with_suffix(".m4a")), "no video stream"),
        (lambda p: write_png(p.with_suffix(".png")), "still image"),
    ],
    ids=["text", "random", "empty", "audio-only", "png"],
)
def test_non_videos_raise_clear_errors(tmp_path, make, words):
    path = make(tmp_path / "bad.mp4")
    with pytest.raises(VideoFormatError) as ei:
        load_video(path)
    assert path in str(ei.value) and words in str(ei.value)
    assert isinstance(ei.value, ValueError)
    with pytest.raises(VideoError):
        probe_video(path)


def test_missing_file_and_audio_probe(tmp_path):
    with pytest.raises(VideoError, match="nope.mp4: no such file; check the path"):  # the CLI's wording
        load_video(tmp_path / "nope.mp4")
    info = probe_video(write_audio_only(tmp_path / "a.m4a"), require_video=False)
    assert not info.has_video and info.has_audio


def test_truncated_file_raises_video_error(tmp_path, vids):
    data = open(vids["h264"], "rb").read()
    path = tmp_path / "cut.mp4"
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(VideoError) as ei:
        load_video(path)
    assert str(path) in str(ei.value)


def test_timeout_gives_clear_error(monkeypatch, vids):
    from specvlm.video import backends

    released = threading.Event()

    def hang(info, size, config, cancel):
        cancel.wait(10)
        released.set()
        raise VideoDecodeError("cancelled")

    monkeypatch.setattr(backends, "decode", hang)
    with pytest.raises(VideoTimeoutError, match="longer than 0.3 s"):
        load_video(vids["h264"], timeout_s=0.3)
    assert released.wait(5)  # the worker was told to stop


# ----------------------------------------------------------------------------- in-memory clips


def test_frames_to_clip():
    frames = np.stack([ramp_frame(i, 8, 6) for i in range(5)])
    clip = frames_to_clip(frames, fps=4.0)
    assert clip.frames.shape == (5, 6, 8, 3)
    np.testing.assert_allclose(clip.timestamps, [0, 0.25, 0.5, 0.75, 1.0])
    assert clip.total_frames == 5 and clip.duration == pytest.approx(1.25) and clip.sample_fps == pytest.approx(4.0)
    assert frames_to_clip(frames[0], fps=1.0).frames.shape == (1, 6, 8, 3)
    with pytest.raises(VideoError, match="uint8"):
        frames_to_clip(frames.astype(np.float32), fps=4.0)
    with pytest.raises(VideoError, match="shape"):
        frames_to_clip(frames[..., :2], fps=4.0)
    with pytest.raises(VideoError, match="fps"):
        frames_to_clip(frames, fps=0)


def test_damaged_packets_never_leak_raw_errors(tmp_path):
    rng = np.random.default_rng(0)
    noise = lambda i, w, h: rng.integers(0, 256, (h, w, 3), dtype=np.uint8)  # noqa: E731
    path = tmp_path / "damaged.mp4"
    write_video(path, n=30, w=160, h=96, frame_fn=noise)
    data = bytearray(path.read_bytes())
    for k in rng.integers(len(data) // 4, len(data) - 64, 100):
        data[k : k + 8] = rng.bytes(8)
    path.write_bytes(bytes(data))
    try:
        clip = load_video(path, VideoConfig(num_frames=8), timeout_s=20)
    except VideoError as e:
        assert str(path) in str(e)
    else:
        assert clip.frames.shape == (8, 96, 160, 3) and clip.frames.dtype == np.uint8


def test_single_frame_gif_is_a_still_image(tmp_path):
    path = write_video(tmp_path / "still.gif", n=1, codec="gif", pix_fmt="rgb8", frame_fn=palette_frame)
    with pytest.raises(VideoFormatError, match="still image"):
        load_video(path)
