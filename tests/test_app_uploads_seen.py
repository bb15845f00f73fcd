"""What the page says about an upload at upload time: an unusable video (audio only, not a video) in one
line, a file dropped on the wrong box named as such, and the player's note for formats it cannot show."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from app.inputs.preview import upload_view
from app.inputs.settings import UserError
from app.inputs.uploads import check_box, load_truth


def _probe(path):
    from app.runs.facade import SpecvlmFacade
    return SpecvlmFacade().probe_video(path)


def _ffmpeg(*args: str) -> None:
    import imageio_ffmpeg
    subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-y", *args], check=True, timeout=60)


def test_an_audio_only_upload_is_refused_at_upload_time(tmp_path):
    audio = tmp_path / "song.mp4"
    _ffmpeg("-f", "lavfi", "-i", "sine=frequency=440:duration=1", "-c:a", "aac", str(audio))
    seen = upload_view(str(audio), _probe, lambda: tmp_path)
    assert seen.problem == ("Cannot use this video: song.mp4: has no video stream (an audio-only file); upload a "
                            "file with a video track.")
    assert str(tmp_path) not in seen.problem and seen.preview is None


def test_a_text_file_renamed_mp4_is_refused_at_upload_time(tmp_path):
    fake = tmp_path / "notes.mp4"
    fake.write_text("not a video at all\n" * 20)
    seen = upload_view(str(fake), _probe, lambda: tmp_path)
    assert seen.problem is not None and seen.problem.startswith("Cannot use this video: notes.mp4")


def test_a_gif_gets_a_preview_and_a_note_about_the_player(tmp_path):
    gif = tmp_path / "anim.gif"
    _ffmpeg("-f", "lavfi", "-i", "testsrc=size=64x48:rate=5:duration=1", str(gif))
    seen = upload_view(str(gif), _probe, lambda: tmp_path)
    assert seen.problem is None and seen.preview and Path(seen.preview).is_file()
    assert seen.note.startswith("*The video player cannot show GIF: it shows a small H.264 preview")
    assert "browser" not in seen.note                     # browsers show GIFs; the video player does not
    h264 = tmp_path / "ok.mp4"
    _ffmpeg("-f", "lavfi", "-i", "testsrc=size=64x48:rate=5:duration=1", "-c:v", "libx264", "-pix_fmt", "yuv420p",
            str(h264))
    assert upload_view(str(h264), _probe, lambda: tmp_path).note == ""   # plays as it is: nothing to say


@pytest.mark.parametrize("name,box,words", [
    ("clip.srt", "ground-truth", "The ground-truth box takes a .json file; 'clip.srt' is not one. It looks like a "
                                 "file for the Subtitles (.srt) box: drop it there."),
    ("clip.json", "subtitle", "The subtitle box takes a .srt file; 'clip.json' is not one. It looks like a file for "
                              "the Ground truth (.json) box: drop it there."),
    ("clip.txt", "subtitle", "The subtitle box takes a .srt file; 'clip.txt' is not one."),
])
def test_a_file_on_the_wrong_box_is_named(tmp_path, name, box, words):
    path = tmp_path / name
    path.write_text("1\n00:00:01,000 --> 00:00:02,000\nhi\n")
    with pytest.raises(UserError) as e:
        check_box(str(path), box)
    assert str(e.value) == words
    if box == "ground-truth":
        with pytest.raises(UserError, match="takes a .json file"):
            load_truth(str(path))
    check_box(str(path.with_suffix(".SRT" if box == "subtitle" else ".json")), box)  # the right type passes
