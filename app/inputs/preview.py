"""A small H.264 preview for the player when the browser cannot play an upload (HEVC, GIF, AVI, ...).

The run always reads the uploaded file; only the page's player shows the preview. The preview is
made with the FFmpeg binary that ships with the ``imageio-ffmpeg`` package (no system FFmpeg).

Source: docs/design.md §8 (video traps).
"""
from __future__ import annotations

import dataclasses
import logging
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

PLAYABLE_CODECS = frozenset({"h264", "vp8", "vp9", "av1"})
"""Video codecs every current browser plays."""
PLAYABLE_CONTAINERS = frozenset({".mp4", ".m4v", ".webm", ".mov", ".ogv"})
"""Containers browsers open in a ``<video>`` element."""
PREVIEW_MAX_SIDE = 480
"""Longest side of a preview (pixels)."""
PREVIEW_MAX_S = 60
"""Longest preview (seconds); the run still reads the whole upload."""


def browser_playable(path: str, codec: str | None) -> bool:
    """True when browsers play this file as it is (container and codec).

    Source: docs/design.md §8 (video traps).
    """
    return Path(path).suffix.lower() in PLAYABLE_CONTAINERS and (codec or "").lower() in PLAYABLE_CODECS


def make_preview(path: str, folder: str | Path, timeout_s: float = 60.0) -> str | None:
    """Write a small H.264 MP4 of ``path`` into ``folder`` (no audio, at most :data:`PREVIEW_MAX_SIDE`
    px and :data:`PREVIEW_MAX_S` s). Returns its path, or None when FFmpeg is missing or fails
    (the page then shows a note instead; the failure is logged).

    Source: docs/design.md §8 (video traps).
    """
    try:
        import imageio_ffmpeg
        exe = imageio_ffmpeg.get_ffmpeg_exe()
    except (ImportError, RuntimeError) as e:
        log.info("no FFmpeg binary for a preview: %s", e)
        return None
    out = Path(folder) / f"{Path(path).stem}-preview-{uuid.uuid4().hex[:8]}.mp4"
    scale = (f"scale='min({PREVIEW_MAX_SIDE},iw)':'min({PREVIEW_MAX_SIDE},ih)':force_original_aspect_ratio=decrease,"
             "scale=trunc(iw/2)*2:trunc(ih/2)*2")
    cmd = [exe, "-nostdin", "-v", "error", "-y", "-i", str(path), "-t", str(PREVIEW_MAX_S), "-an", "-vf", scale,
           "-c:v", "libx264", "-preset", "veryfast", "-crf", "28", "-pix_fmt", "yuv420p", "-movflags", "+faststart",
           str(out)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("preview of %s failed: %s", path, e)
        out.unlink(missing_ok=True)
        return None
    if r.returncode != 0 or not out.is_file() or out.stat().st_size == 0:
        log.warning("preview of %s failed: %s", path, r.stderr.strip()[-500:])
        out.unlink(missing_ok=True)
        return None
    return str(out)


def describe_codec(info: Any, path: str) -> str:
    """'HEVC', 'GIF', ... for the page's note."""
    codec = (getattr(info, "codec", "") or "").lower()
    names = {"hevc": "HEVC (H.265)", "h265": "HEVC (H.265)", "gif": "GIF", "mpeg4": "MPEG-4 Part 2",
             "prores": "ProRes", "mjpeg": "Motion JPEG"}
    return names.get(codec, codec.upper() or Path(path).suffix.lstrip(".").upper() or "this format")


@dataclasses.dataclass(frozen=True)
class UploadView:
    """What the page shows for a fresh video upload.

    Attributes:
        preview: an H.264 preview to put in the player instead of the upload (None: the upload itself).
        note: the Markdown note under the player ("" when there is nothing to say).
        problem: a one-line message when the file cannot be used (also shown as a warning), else None.
    """

    preview: str | None = None
    note: str = ""
    problem: str | None = None


def upload_view(path: str, probe: Callable[[str], Any] | None, folder: Callable[[], Path],
                timeout_s: float = 60.0) -> UploadView:
    """Probe a fresh upload: a problem (not a video, audio only, unreadable) is said at once, in one line; a
    file the player cannot show (HEVC, GIF, AVI, ...) gets an H.264 preview made in ``folder()``.

    Args:
        path: the uploaded file.
        probe: ``probe(path) -> VideoInfo`` (raises ValueError for a file that is no usable video), or None.
        folder: makes the folder a preview is written to (called only when one is needed).
        timeout_s: time limit for making the preview.
    """
    if probe is None:
        return UploadView()
    try:
        info = probe(path)
    except ValueError as e:  # VideoError: the same words the run would use, at upload time
        return UploadView(problem=f"Cannot use this video: {str(e).replace(str(path), Path(path).name)}")
    except Exception as e:  # an unexpected probe failure: the run will say what it can
        log.info("could not probe %s for a preview: %s: %s", Path(path).name, type(e).__name__, e)
        return UploadView()
    if browser_playable(path, getattr(info, "codec", "")):
        return UploadView()
    what = describe_codec(info, path)
    clip = make_preview(path, folder(), timeout_s=timeout_s)
    if clip is None:
        return UploadView(note=f"*The video player cannot show {what}; the run reads the file as uploaded.*")
    return UploadView(clip, f"*The video player cannot show {what}: it shows a small H.264 preview; the run reads "
                            "the uploaded file.*")


def source_of(video: Any, previews: dict[str, str]) -> Any:
    """The upload a page's video value stands for: the original file when the player shows its preview
    (``previews`` maps a preview's file name to its upload)."""
    if video and Path(str(video)).name in previews:
        return previews[Path(str(video)).name]
    return video


def upload_view_for(backend: Any, path: str) -> UploadView:
    """:func:`upload_view` with ``backend``'s probe and time limit (:class:`app.runs.backend.Backend`) and a new folder
    in Gradio's upload folder for the preview."""
    from app.page.gradio_io import gradio_upload_dir

    def folder() -> Path:  # served as is, deleted with the upload
        made = Path(gradio_upload_dir()) / f"preview-{uuid.uuid4().hex[:12]}"
        made.mkdir(parents=True, exist_ok=True)
        return made
    timeout = getattr(getattr(backend, "limits", None), "video_timeout_s", 60.0)
    return upload_view(path, getattr(backend.engine, "probe_video", None), folder, timeout_s=timeout)
