"""Test media and runs: clips in memory, videos and images written with PyAV or Pillow, the CLI in a subprocess."""
from __future__ import annotations

import fractions
import subprocess
import sys
from pathlib import Path

import av
import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def make_clip(num_frames: int = 8, side: int = 112, seed: int = 0, fps: float = 4.0):
    """A random-pixel clip with smooth structure so features vary across tokens."""
    from specvlm.types import VideoClip

    rng = np.random.RandomState(seed)
    frames = rng.randint(0, 255, (num_frames, side, side, 3), dtype=np.uint8)
    return VideoClip(frames, np.arange(num_frames) / fps, native_fps=fps, total_frames=num_frames,
                     duration=num_frames / fps)


def ramp_frame(i: int, w: int, h: int) -> np.ndarray:
    return np.full((h, w, 3), (8 * i) % 256, np.uint8)


def write_video(
    path,
    n=20,
    w=64,
    h=48,
    fps=10,
    codec="libx264",
    pix_fmt="yuv420p",
    pts_ms=None,
    rotation=None,
    frame_fn=ramp_frame,
    audio=False,
):
    """Encode n frames with PyAV; pts_ms gives explicit times (ms) for variable frame rate."""
    c = av.open(str(path), "w")
    s = c.add_stream(codec, rate=fps)
    s.width, s.height, s.pix_fmt = w, h, pix_fmt
    if codec == "libx264":
        s.options = {"crf": "0"}
    if pts_ms is not None:
        s.codec_context.time_base = fractions.Fraction(1, 1000)
        s.time_base = fractions.Fraction(1, 1000)
    if rotation is not None:
        s.set_display_rotation(rotation)
    a = c.add_stream("aac", rate=16000) if audio else None
    for i in range(n):
        fmt = "rgb8" if pix_fmt == "rgb8" else "rgb24"
        img = frame_fn(i, w, h)
        f = av.VideoFrame.from_ndarray(img, format="rgb24")
        if fmt != "rgb24":
            f = f.reformat(format=fmt)
        if pts_ms is not None:
            f.pts, f.time_base = pts_ms[i], fractions.Fraction(1, 1000)
        for p in s.encode(f):
            c.mux(p)
    for p in s.encode():
        c.mux(p)
    if a is not None:
        _encode_audio(c, a)
    c.close()
    return str(path)


def _encode_audio(container, stream, seconds=1.0):
    for k in range(int(seconds * 16000 / 1024)):
        fr = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
        fr.sample_rate, fr.pts = 16000, k * 1024
        for p in stream.encode(fr):
            container.mux(p)
    for p in stream.encode():
        container.mux(p)


def frame_ids(frames: np.ndarray) -> list[int]:
    """Ramp frame index recovered from the mean brightness."""
    return [int(round(float(f.mean()) / 8)) for f in frames]


def marker_frame(i, w, h):
    img = np.zeros((h, w, 3), np.uint8)
    img[: h // 4, : w // 4] = 255  # white block in the top-left corner
    return img


def palette_frame(i, w, h):
    colours = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 255)]
    return np.tile(np.array(colours[i % 4], np.uint8), (h, w, 1))


def write_audio_only(path):
    c = av.open(str(path), "w")
    _encode_audio(c, c.add_stream("aac", rate=16000))
    c.close()
    return str(path)


def write_png(path):
    from PIL import Image

    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(path)
    return str(path)


def write_mp4(path: Path, frames: np.ndarray, fps: int = 8) -> Path:
    """Write uint8 (T,H,W,3) frames as H.264 mp4 with PyAV."""
    with av.open(str(path), "w") as out:
        st = out.add_stream("libx264", rate=fps)
        st.width, st.height, st.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
        for f in frames:
            for pkt in st.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                out.mux(pkt)
        for pkt in st.encode():
            out.mux(pkt)
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specvlm", *args], capture_output=True, text=True, cwd=ROOT,
                          env={"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}, timeout=300)
