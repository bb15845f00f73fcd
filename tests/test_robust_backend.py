"""Bad input through the app's Backend: every bad input ends in one readable message (or a
correct result), the backend keeps serving, memory and worker threads are released.

The engine here is the real one for everything but the model: real probe / video decoding /
subtitle parsing / model loading errors / OOM handling, with the fake token stream of
tests/helpers/fakes.py (no weights). Videos are written by PyAV into temporary folders.
"""
from __future__ import annotations

import codecs
import gc
import json
import math
import subprocess
import threading
import time
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from helpers.app_fakes import OOMEngine
from helpers.engines import IOEngine, fake_settings, run_to_end
from helpers.fakes import FakeEngine
from helpers.media import marker_frame, palette_frame, write_audio_only, write_png, write_video

from app.inputs.settings import DEFAULT_PROMPT, Limits, RunRequest, RunSettings, UserError
from app.inputs.uploads import UploadJanitor
from app.runs.backend import WORKER_PREFIX, Backend
from app.runs.facade import SpecvlmFacade

pytestmark = pytest.mark.timeout(60)


def _ok(last):
    assert "error" not in last, last.get("error")
    assert last["status"].startswith("**Done.**"), last["status"]
    return last


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return write_video(tmp_path_factory.mktemp("v") / "clip.mp4", n=8, w=64, h=48)


# ---- not a video / damaged ---------------------------------------------------------------

def _truncated(p: Path) -> str:
    src = Path(write_video(p.with_name("src.mp4"), n=20))
    p.write_bytes(src.read_bytes()[: src.stat().st_size // 3])
    return str(p)


@pytest.mark.parametrize("make,words", [
    (lambda p: (p.with_suffix(".txt").write_text("hello\nworld\n" * 50), str(p.with_suffix(".txt")))[1], "text file"),
    (lambda p: (p.write_bytes(np.random.default_rng(0).bytes(4096)), str(p))[1], "not a recognised"),
    (lambda p: (p.write_bytes(b""), str(p))[1], "empty"),
    (lambda p: write_audio_only(p.with_suffix(".m4a")), "no video stream"),
    (lambda p: write_png(p.with_suffix(".png")), "still image"),
    (_truncated, "cut.mp4"),
], ids=["text", "random-bytes", "empty", "audio-only", "image", "truncated"])
def test_not_a_video_gives_one_message_before_any_model_work(tmp_path, make, words):
    path = make(tmp_path / "cut.mp4")
    eng = IOEngine()
    last = run_to_end(Backend(eng), path)
    assert last["status"].startswith("**Error:** Could not read the video:"), last["status"]
    assert Path(path).name in last["error"] and words in last["error"]
    assert str(tmp_path) not in last["error"]   # the upload's name, not the server's temp folder
    assert eng.fake.loads == 0  # probed first: no model was loaded for a bad file


# ---- codecs, rotation, sizes -------------------------------------------------------------

def test_codec_fallbacks_rotation_and_tiny_sizes_run(tmp_path):
    eng = IOEngine()
    b = Backend(eng)
    cases = {
        "h265": write_video(tmp_path / "h265.mp4", n=8, codec="libx265"),
        "gif": write_video(tmp_path / "anim.gif", n=8, codec="gif", pix_fmt="rgb8", frame_fn=palette_frame),
        "rot90": write_video(tmp_path / "rot.mp4", n=4, frame_fn=marker_frame, rotation=90),
        "tiny": write_video(tmp_path / "tiny.mp4", n=6, w=16, h=16),
        "odd": write_video(tmp_path / "odd.mp4", n=5, w=17, h=15, pix_fmt="yuv444p"),
        "one": write_video(tmp_path / "one.mp4", n=1, w=32, h=32),
    }
    if "libsvtav1" in av.codecs_available:
        cases["av1"] = write_video(tmp_path / "av1.mkv", n=8, codec="libsvtav1")
    for name, path in cases.items():
        last = _ok(run_to_end(b, path))
        clip = eng.clips[-1]
        assert min(clip.frames.shape[1:3]) >= 28, name  # upscaled for Qwen2.5-VL's processor
        if name in ("gif", "av1"):
            assert "decoded with PyAV" in last["status"]
        if name in ("tiny", "odd"):
            assert "upscaled" in last["status"]
    rot = eng.clips[2].frames  # one prepare per run: h265, gif, then rot90
    assert rot.shape[1:3] == (64, 48)  # 64x48 coded, shown upright as portrait
    assert eng.fake.loads == 1


def test_4k_video_is_downscaled_and_says_so(tmp_path):
    import imageio_ffmpeg
    path = tmp_path / "uhd.mp4"
    subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-y", "-f", "lavfi", "-i",
                    "color=c=gray:size=3840x2160:rate=8:duration=1", "-c:v", "libx264", "-preset", "ultrafast",
                    "-pix_fmt", "yuv420p", str(path)], check=True, timeout=50)
    eng = IOEngine()
    last = _ok(run_to_end(Backend(eng), path, num_frames=8))
    assert eng.clips[-1].frames.shape == (8, 336, 597, 3)
    assert "downscaled 3840x2160 -> 597x336" in last["status"]


@pytest.mark.timeout(10)
def test_decode_time_limit_gives_a_message_and_the_next_request_works(tmp_path, clip, monkeypatch):
    import specvlm.video as video
    from specvlm.video import backends
    real = backends.decode
    release = threading.Event()

    def hang(info, size, config, cancel):
        if info.path.endswith("stuck.mp4"):
            release.wait(20)
            raise video.VideoDecodeError("released")
        return real(info, size, config, cancel)

    monkeypatch.setattr(backends, "decode", hang)
    stuck = write_video(tmp_path / "stuck.mp4", n=4)
    b = Backend(IOEngine(video_timeout_s=0.5))
    last = run_to_end(b, stuck)   # within the test's timeout: the reader is abandoned after 0.5 s, not waited for
    assert "stuck.mp4" in last["error"] and "longer than 0.5 s" in last["error"]
    _ok(run_to_end(b, clip))
    release.set()


def test_one_frame_16px_video_through_the_real_engine_and_tiny_model(tmp_path):
    """Sub-28 px, a single frame (odd count, temporal patch 2): the real processor and decoder."""
    from helpers.engines import TINY, TinyEngine
    path = write_video(tmp_path / "dot.mp4", n=1, w=16, h=16)
    b = Backend(TinyEngine(), device="cpu", dtype="float32", limits=Limits())
    ups = list(b.run(RunRequest(path, "What is shown?", RunSettings(preset=TINY, num_frames=4, max_new_tokens=6,
                                                                    depth=3, top_k=2, total_tokens=6)), session="t"))
    last = _ok(ups[-1])
    assert "Outputs identical" in last["summary"] and "upscaled 16x16 -> 32x32" in last["status"]


# ---- limits ------------------------------------------------------------------------------

def test_upload_size_and_duration_limits(tmp_path, clip):
    b = Backend(IOEngine(), limits=Limits(max_upload_mb=0.001))
    last = run_to_end(b, clip)
    assert "clip.mp4" in last["error"] and "accepts up to 0.001 MB" in last["error"]
    long = write_video(tmp_path / "long.mp4", n=80, w=32, h=32, fps=10)  # 8 s
    b = Backend(IOEngine(), limits=Limits(max_duration_s=5))
    last = run_to_end(b, long)
    assert "long.mp4" in last["error"] and "8.0 s long" in last["error"] and "up to 5.0 s" in last["error"]
    _ok(run_to_end(b, clip))


def test_missing_upload_says_upload_again(tmp_path):
    last = run_to_end(Backend(IOEngine()), tmp_path / "gone.mp4")
    assert "no longer on the server" in last["error"] and "upload it again" in last["error"]
    assert "Upload a video" in run_to_end(Backend(IOEngine()), None)["error"]


def test_limits_from_env_and_validation(monkeypatch):
    monkeypatch.setenv("SPECVLM_MAX_UPLOAD_MB", "12.5")
    monkeypatch.setenv("SPECVLM_MAX_PROMPT_CHARS", "300")
    monkeypatch.setenv("SPECVLM_MAX_DURATION_S", "junk")  # ignored with a warning
    lim = Limits.from_env(max_frames=64)
    assert (lim.max_upload_mb, lim.max_prompt_chars, lim.max_duration_s, lim.max_frames) == (12.5, 300, 600.0, 64)
    assert isinstance(lim.max_prompt_chars, int)
    with pytest.raises(ValueError, match="max_frames"):
        Limits(max_frames=0)
    assert "12.5 MB" in lim.describe() and "10 min" in lim.describe()


def test_app_py_flags_and_env(monkeypatch):
    import importlib.util
    spec = importlib.util.spec_from_file_location("app_main", Path(__file__).resolve().parent.parent / "app.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setenv("SPECVLM_MAX_DURATION_S", "90")
    args = mod.parse_args(["--max-upload-mb", "50", "--max-prompt-chars", "500"])
    lim = mod.limits_from_args(args)
    assert (lim.max_upload_mb, lim.max_duration_s, lim.max_prompt_chars) == (50.0, 90.0, 500)
    with pytest.raises(SystemExit):
        mod.parse_args(["--max-duration-s", "0"])


@pytest.mark.parametrize("flags, words", [
    (["--device", "tpu"], "--device: device 'tpu' is not a valid torch device"),
    (["--dtype", "float8"], "invalid choice: 'float8'"),
    (["--port", "99999"], "--port 99999 is out of range"),
], ids=["device", "dtype", "port"])
def test_app_py_refuses_bad_startup_flags(flags, words, capsys):
    """A bad --device/--dtype/--port stops the app at startup (exit 2, one line), not at the first Run."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("app_main", Path(__file__).resolve().parent.parent / "app.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(SystemExit) as exc:
        mod.parse_args(flags)
    assert exc.value.code == 2 and words in capsys.readouterr().err


def test_app_py_port_in_use_is_one_line():
    """``serve`` ends with SystemExit(message): Python prints the one line on stderr, no traceback, and exits 1
    (``python app.py`` itself runs as a subprocess in tests/test_app_server_log.py)."""
    import importlib.util
    import socket

    import torch
    spec = importlib.util.spec_from_file_location("app_main", Path(__file__).resolve().parent.parent / "app.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    threads = torch.get_num_threads()
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            port = s.getsockname()[1]
            with pytest.raises(SystemExit) as exc:
                mod.serve(["--port", str(port)])
    finally:
        torch.set_num_threads(threads)   # serve() chose the process's threads
    message = exc.value.code
    assert isinstance(message, str) and "\n" not in message      # a str code: printed as one line, exit status 1
    assert f"cannot listen on 127.0.0.1:{port}" in message and "--port" in message


# ---- prompt and settings -----------------------------------------------------------------

def test_empty_prompt_uses_the_default_and_says_so(clip):
    eng = IOEngine()
    last = _ok(run_to_end(Backend(eng), clip, prompt="   \n"))
    assert eng.prompts[-1] == DEFAULT_PROMPT and "prompt was empty" in last["status"]


def test_prompt_length_limit(clip):
    eng = IOEngine()
    b = Backend(eng, limits=Limits(max_prompt_chars=50))
    _ok(run_to_end(b, clip, prompt="x" * 50))
    last = run_to_end(b, clip, prompt="x" * 51)
    assert "51 characters" in last["error"] and "up to 50" in last["error"]
    assert len(eng.prompts) == 1  # prepared once, for the first run only


@pytest.mark.parametrize("kw,words", [
    (dict(drop_rate=1.0), "drop_rate"), (dict(drop_rate=-0.1), "drop_rate"),
    (dict(top_p=1.5), "top_p"), (dict(top_p=float("nan")), "finite"),
    (dict(depth=0), "depth"), (dict(depth=17), "depth"),
    (dict(top_k=0), "top_k"), (dict(top_k=17), "top_k"),
    (dict(total_tokens=0), "total_tokens"), (dict(total_tokens=129), "total_tokens"),
    (dict(min_prob=1.0), "min_prob"), (dict(min_prob=-0.5), "min_prob"), (dict(min_prob="x"), "early stop"),
    (dict(num_frames=0), "num_frames"), (dict(num_frames=257), "frames=257 is above this server's limit of 256"),
    (dict(max_new_tokens=0), "max_new_tokens"), (dict(max_new_tokens=1025), "limit of 1024"),
    (dict(max_new_tokens=2.5), "whole number"), (dict(depth="five"), "whole number"),
    (dict(tree_shape="bogus"), "tree shape"), (dict(method="bogus"), "unknown"),
], ids=lambda v: str(v) if isinstance(v, str) else None)
def test_settings_out_of_range_are_named(clip, kw, words):
    last = run_to_end(Backend(IOEngine()), clip, **kw)
    assert last["status"].startswith("**Error:** Invalid setting") and words in last["error"], last["error"]


# ---- models ------------------------------------------------------------------------------

@pytest.fixture
def no_remote_code(monkeypatch):
    """Record every AutoConfig / AutoModel load and fail the test if trust_remote_code is enabled."""
    import transformers
    seen = []
    for cls in (transformers.AutoConfig, transformers.AutoModelForImageTextToText, transformers.AutoProcessor):
        orig = cls.from_pretrained.__func__

        def wrapped(klass, *a, _orig=orig, **k):
            seen.append(k.get("trust_remote_code"))
            assert not k.get("trust_remote_code"), "trust_remote_code must never be enabled"
            return _orig(klass, *a, **k)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(wrapped))
    return seen


def test_model_that_does_not_exist(clip, monkeypatch, no_remote_code):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    last = run_to_end(Backend(IOEngine()), clip, custom_model="nonexistent-org/no-such-model-xyz")
    assert last["error"] == ("This custom model needs 'nonexistent-org/no-such-model-xyz' from the Hugging Face Hub, "
                             "which this server cannot reach: pick the bundled preset, or run once with network "
                             "access so the models are cached.")     # refused before any loading, in one line

    class Reachable(IOEngine):   # the Hub answers, the id does not exist: the loader's one-line message
        def model_available(self, model):
            return True
    last = run_to_end(Backend(Reachable()), clip, custom_model="nonexistent-org/no-such-model-xyz")
    assert last["error"].startswith("Could not load model 'nonexistent-org/no-such-model-xyz': ")
    assert "Qwen2.5-VL / LLaVA-OneVision" in last["error"] and "\n" not in last["error"]


@pytest.mark.timeout(30)
def test_model_needing_remote_code_is_refused_without_a_prompt(tmp_path, clip, monkeypatch, no_remote_code):
    d = tmp_path / "custom"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "model_type": "my_fancy_vlm", "architectures": ["FancyVLM"],
        "auto_map": {"AutoConfig": "configuration_fancy.FancyConfig",
                     "AutoModelForImageTextToText": "modeling_fancy.FancyVLM"}}))
    (d / "configuration_fancy.py").write_text("raise SystemExit('remote code ran')\n")
    monkeypatch.setattr("builtins.input", lambda *a: pytest.fail("asked on the console"))
    last = run_to_end(Backend(IOEngine()), clip, custom_model=str(d))
    assert "needs custom code" in last["error"] and "trust_remote_code" in last["error"]
    assert "never runs" in last["error"] and no_remote_code  # the loader was called, without remote code


def test_unsupported_model_family(tmp_path, clip, no_remote_code):
    d = tmp_path / "llama"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2,
                                               "num_hidden_layers": 1, "intermediate_size": 8, "vocab_size": 10}))
    last = run_to_end(Backend(IOEngine()), clip, custom_model=str(d))
    assert "type 'llama'" in last["error"] and "qwen2_5_vl" in last["error"]


# ---- out of memory -----------------------------------------------------------------------

def test_out_of_memory_gives_a_message_frees_memory_and_the_next_request_works(clip, monkeypatch):
    freed = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: freed.append(time.perf_counter()))
    eng = OOMEngine()
    b = Backend(eng)
    last = run_to_end(b, clip)
    assert last["status"].startswith("**Error:** Out of memory") and "fewer frames" in last["error"]
    assert freed, "torch.cuda.empty_cache() was not called"
    assert eng.cache_ref is not None and eng.cache_ref() is None  # nothing pins the failed step's tensors
    assert not b.active_workers()
    _ok(run_to_end(b, clip))


def test_out_of_memory_while_loading_the_model(clip, monkeypatch):
    freed = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: freed.append(1))
    eng = IOEngine()
    calls = []

    def load(target, draft, device, dtype):
        calls.append(target)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory.")
        return eng.fake.load_pair(target, draft, device, dtype)

    eng.load_pair = load
    b = Backend(eng)
    last = run_to_end(b, clip)
    assert "out of memory" in last["error"] and "smaller model" in last["error"] and freed
    _ok(run_to_end(b, clip))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (runs on GPU machines)")
def test_real_cuda_oom_releases_device_memory(clip):
    class CudaOOM(IOEngine):
        def stream(self, pair, inputs, config, should_stop):
            if getattr(self, "boomed", False):
                return super().stream(pair, inputs, config, should_stop)
            self.boomed = True
            return self._boom()

        def _boom(self):
            held = torch.empty(1 << 30, device="cuda")  # 4 GiB, like a KV cache
            yield from ()
            torch.empty(1 << 50, device="cuda", dtype=torch.uint8) + held.sum()  # 1 PiB: a real CUDA OOM

    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    b = Backend(CudaOOM())
    last = run_to_end(b, clip)
    assert last["status"].startswith("**Error:** Out of memory")
    assert torch.cuda.memory_allocated() == before  # the 4 GiB tensor is gone
    assert torch.cuda.memory_reserved() < (1 << 30)  # and returned by empty_cache()
    _ok(run_to_end(b, clip))


def test_is_oom_recognises_host_and_device_errors():
    e = SpecvlmFacade()
    assert e.is_oom(torch.OutOfMemoryError("x")) and e.is_oom(MemoryError())
    assert e.is_oom(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes"))
    assert not e.is_oom(RuntimeError("shape mismatch"))


# ---- stop ----------------------------------------------------------------------------------

def _workers():
    return [t for t in threading.enumerate() if t.name.startswith(WORKER_PREFIX)]


def test_stop_ends_the_decode_thread_then_a_new_run_works(clip):
    eng = IOEngine(FakeEngine(step_s=0.01))
    b = Backend(eng, update_interval_s=0.02)
    gen = b.run(RunRequest(str(clip), "", fake_settings(max_new_tokens=1000)), session="u")
    for upd in gen:
        if "0 tokens" not in (upd.get("vanilla_stats") or "0 tokens"):   # the first update clears them: ""
            assert b.active_workers(), "the decode runs in a worker thread"
            b.stop("u")
            break
    rest = list(gen)
    assert "Stopped" in rest[-1]["status"]
    assert not _workers()  # the thread is gone, not merely abandoned
    assert eng.fake.ended == ["stopped"]  # its engine loop ended through the stop check: no CPU use
    _ok(run_to_end(b, clip, session="u"))


def test_stop_before_decoding_starts_skips_the_decode(clip):
    eng = IOEngine()
    b = Backend(eng)
    orig = eng.load_pair

    def load_and_stop(*a):
        b.stop("u")  # Stop pressed while the model loads
        return orig(*a)

    eng.load_pair = load_and_stop
    ups = list(b.run(RunRequest(str(clip), "", fake_settings()), session="u"))
    assert "Stopped" in ups[-1]["status"] and eng.fake.streams == [] and not _workers()


def test_closing_the_page_mid_run_ends_the_worker(clip):
    eng = IOEngine(FakeEngine(step_s=0.01))
    gen = Backend(eng, update_interval_s=0.02).run(RunRequest(str(clip), "", fake_settings(max_new_tokens=1000)))
    for upd in gen:
        if "0 tokens" not in (upd.get("vanilla_stats") or "0 tokens"):   # the first update clears them: ""
            break
    gen.close()
    assert not _workers()


# ---- subtitles -----------------------------------------------------------------------------

SRT = "1\n00:00:01,000 --> 00:00:02,500\nHello there.\n\n2\n00:00:03,000 --> 00:00:04,000\nCaf\u00e9 \u2013 ok\n"


@pytest.mark.parametrize("name,data,first", [
    ("bom-crlf", codecs.BOM_UTF8 + SRT.replace("\n", "\r\n").encode(), "[00:01.0 - 00:02.5] Hello there."),
    ("cp1252", SRT.encode("cp1252"), "[00:01.0 - 00:02.5] Hello there."),
    ("dot-ms-no-hours", b"1\n00:01.500 --> 00:02.250\nDots\n", "[00:01.5 - 00:02.2] Dots"),
    ("unordered-overlap", b"2\n00:00:05,000 --> 00:00:08,000\nlater\n\n1\n00:00:01,000 --> 00:00:06,000\nfirst\n",
     "[00:01.0 - 00:06.0] first"),
    ("empty", b"", ""),
])
def test_subtitle_files_through_the_backend(tmp_path, name, data, first):
    path = tmp_path / f"{name}.srt"
    path.write_bytes(data)
    text = Backend(IOEngine()).subtitles_text(str(path))
    assert text.split("\n")[0] == first
    if name == "cp1252":
        assert "Caf\u00e9 \u2013 ok" in text


def test_binary_junk_subtitles_are_refused(tmp_path):
    path = tmp_path / "junk.srt"
    path.write_bytes(np.random.default_rng(0).bytes(2048))
    with pytest.raises(UserError, match="junk.srt.*binary"):
        Backend(IOEngine()).subtitles_text(str(path))


# ---- uploads are removed -------------------------------------------------------------------

def _upload(folder: Path, name: str, data: bytes = b"video") -> str:
    d = folder / f"hash{len(list(folder.iterdir()))}"
    d.mkdir()
    (d / name).write_bytes(data)
    return str(d / name)


def test_janitor_removes_an_api_upload_after_its_request(tmp_path):
    j = UploadJanitor(tmp_path)
    up = _upload(tmp_path, "a.mp4")
    with j.using([up]):
        assert Path(up).exists()
    assert not Path(up).exists() and list(tmp_path.iterdir()) == []  # the hash folder went too


def test_janitor_keeps_what_a_page_shows_or_a_queued_request_needs(tmp_path):
    queued: set[str] = set()
    j = UploadJanitor(tmp_path, queued=lambda: queued)
    shown, waiting = _upload(tmp_path, "shown.mp4"), _upload(tmp_path, "wait.mp4")
    j.hold("page", "video", shown)
    queued.add(waiting)
    with j.using([shown, waiting]):
        pass
    assert Path(shown).exists() and Path(waiting).exists()  # re-run from the page; next in queue
    queued.clear()
    with j.using([waiting]):
        pass
    assert not Path(waiting).exists()
    newer = _upload(tmp_path, "newer.mp4")
    j.hold("page", "video", newer)  # a new upload replaces the shown one
    assert not Path(shown).exists() and Path(newer).exists()
    j.release_session("page")  # the tab closed
    assert not Path(newer).exists()


def test_janitor_never_deletes_examples_outside_files_or_when_unsure(tmp_path):
    uploads, elsewhere = tmp_path / "up", tmp_path / "assets"
    uploads.mkdir()
    elsewhere.mkdir()
    example = elsewhere / "ex.mp4"
    example.write_bytes(b"example bytes")
    cached_example = _upload(uploads, "ex.mp4", b"example bytes")  # Gradio's cached copy
    j = UploadJanitor(uploads, protected=[example])
    with j.using([cached_example, str(example)]):
        pass
    assert Path(cached_example).exists() and example.exists()
    unsure = UploadJanitor(uploads, queued=lambda: None)
    up = _upload(uploads, "b.mp4")
    with unsure.using([up]):
        pass
    assert Path(up).exists()


def test_backend_run_with_janitor_leaves_the_upload_dir_clean(tmp_path):
    up = _upload(tmp_path, "clip.mp4", Path(write_video(tmp_path / "src.mp4", n=6)).read_bytes())
    (tmp_path / "src.mp4").unlink()
    j = UploadJanitor(tmp_path)
    b = Backend(IOEngine())
    with j.using([up]):
        last = _ok(run_to_end(b, up))
    bad = _upload(tmp_path, "bad.mp4", b"not a video")
    with j.using([bad]):
        last = run_to_end(b, bad)
    assert "bad.mp4" in last["error"]
    gc.collect()
    assert list(tmp_path.rglob("*")) == []


def test_nan_and_inf_are_not_numbers_we_accept(clip):
    last = run_to_end(Backend(IOEngine()), clip, drop_rate=math.inf)
    assert "finite" in last["error"]


def test_missing_or_huge_subtitle_file(tmp_path):
    b = Backend(IOEngine())
    with pytest.raises(UserError, match="gone.srt.*upload it again"):
        b.subtitles_text(str(tmp_path / "gone.srt"))
    big = tmp_path / "big.srt"
    with open(big, "wb") as f:
        f.truncate(6 * 1024 * 1024)
    with pytest.raises(UserError, match="big.srt.*not accepted"):
        b.subtitles_text(str(big))
