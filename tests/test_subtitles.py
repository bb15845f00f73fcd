"""Tests for specvlm.text.subtitles: tolerant .srt parsing and cue-to-frame alignment."""
from __future__ import annotations

import codecs
import logging

import numpy as np
import pytest

from specvlm.text.subtitles import Cue, SubtitleError, cues_for_frames, load_srt, parse_srt

BASIC = """1
00:00:01,000 --> 00:00:02,500
Hello there.

2
00:00:03,000 --> 00:00:04,000
<i>Second</i> line
continues here.
"""


def test_basic_parse():
    cues = parse_srt(BASIC)
    assert cues == [Cue(1.0, 2.5, "Hello there."), Cue(3.0, 4.0, "Second line\ncontinues here.")]


def test_utf8_bom_and_crlf(tmp_path):
    path = tmp_path / "bom.srt"
    path.write_bytes(codecs.BOM_UTF8 + BASIC.replace("\n", "\r\n").encode("utf-8"))
    cues = load_srt(path)
    assert [c.text for c in cues] == ["Hello there.", "Second line\ncontinues here."]
    assert cues[0].start_s == 1.0


def test_utf16_with_bom():
    cues = parse_srt(BASIC.encode("utf-16"))
    assert len(cues) == 2 and cues[0].text == "Hello there."


def test_cp1252_and_latin1_fallback():
    text = "1\n00:00:01,000 --> 00:00:02,000\nCaf\u00e9 \u2013 na\u00efve \u201cquotes\u201d\n"
    cues = parse_srt(text.encode("cp1252"))
    assert cues[0].text == "Caf\u00e9 \u2013 na\u00efve \u201cquotes\u201d"
    raw = b"1\n00:00:01,000 --> 00:00:02,000\nbyte \x81 \xe9\n"  # 0x81 is undefined in cp1252
    assert parse_srt(raw)[0].text == "byte \x81 \u00e9"


def test_dot_milliseconds_and_missing_hours():
    text = (
        "1\n00:00:01.500 --> 00:00:02.25\nDots\n\n"
        "2\n01:02.500 --> 01:04,000\nNo hours\n\n"
        "3\n00:00:05 --> 00:00:06\nNo ms\n"
    )
    cues = parse_srt(text)
    assert [(c.start_s, c.end_s) for c in cues] == [(1.5, 2.25), (5.0, 6.0), (62.5, 64.0)]


def test_unordered_and_overlapping_cues_are_sorted_and_kept():
    text = (
        "2\n00:00:05,000 --> 00:00:08,000\nlater\n\n"
        "1\n00:00:01,000 --> 00:00:06,000\nlong\n\n"
        "3\n00:00:04,000 --> 00:00:05,500\noverlap\n"
    )
    cues = parse_srt(text)
    assert [c.text for c in cues] == ["long", "overlap", "later"]


def test_empty_file_gives_no_cues(tmp_path):
    assert parse_srt(b"") == []
    assert parse_srt(codecs.BOM_UTF8 + b"\r\n  \n") == []
    (tmp_path / "e.srt").write_bytes(b"")
    assert load_srt(tmp_path / "e.srt") == []


def test_binary_junk_raises():
    junk = np.random.default_rng(0).bytes(2048)
    with pytest.raises(SubtitleError, match="binary") as ei:
        parse_srt(junk, name="junk.srt")
    assert "junk.srt" in str(ei.value)
    assert isinstance(ei.value, ValueError)


def test_text_without_cues_raises(caplog):
    with caplog.at_level(logging.WARNING), pytest.raises(SubtitleError, match="no subtitle cues"):
        parse_srt("just some prose\nwith no timings\n", name="notes.txt")
    # only our error speaks: the srt library's "Skipped unparseable SRT data" line is not logged
    assert not [r for r in caplog.records if "unparseable" in r.getMessage()]


def test_garbled_header_is_skipped(caplog):
    text = "%%% not a cue %%%\n\n1\n00:00:01,000 --> 00:00:02,000\nA\n\n2\n00:00:03,000 --> 00:00:04,000\nB\n"
    with caplog.at_level(logging.WARNING):
        assert [c.text for c in parse_srt(text, name="head.srt")] == ["A", "B"]
    skipped = [r.getMessage() for r in caplog.records if "unparseable" in r.getMessage()]
    assert len(skipped) == 1 and skipped[0].startswith("head.srt: ") and "not a cue" in skipped[0]
    assert all(r.name == "specvlm.text.subtitles" for r in caplog.records if "unparseable" in r.getMessage())


def test_invalid_cues_are_dropped():
    text = "1\n00:00:03,000 --> 00:00:02,000\nbackwards\n\n2\n00:00:04,000 --> 00:00:05,000\nok\n"
    assert [c.text for c in parse_srt(text)] == ["ok"]


def test_missing_file_raises(tmp_path):
    with pytest.raises(SubtitleError, match="nope.srt"):
        load_srt(tmp_path / "nope.srt")


# ----------------------------------------------------------------------------- alignment

CUES = [Cue(0.0, 1.0, "one"), Cue(0.5, 2.0, "two\nlines"), Cue(2.2, 2.4, "blink"), Cue(4.5, 6.0, "late")]


def test_cues_for_each_frame():
    ts = np.array([0.0, 1.0, 2.0, 3.0])
    out = cues_for_frames(CUES, ts)
    # frame i stands for [t_i, t_{i+1}); the 0.2 s cue between frames 2 and 3 is not lost
    assert out == ["one two lines", "two lines", "blink", ""]


def test_cues_for_frame_groups():
    ts = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    assert cues_for_frames(CUES, ts, frames_per_group=2) == ["one two lines", "blink", "late"]
    assert cues_for_frames(CUES, ts, frames_per_group=2, sep=" | ") == ["one | two lines", "blink", "late"]


def test_duplicate_texts_are_joined_once():
    cues = [Cue(0.0, 1.0, "same"), Cue(1.0, 2.0, "same"), Cue(1.5, 2.0, "other")]
    assert cues_for_frames(cues, [0.0, 1.0], frames_per_group=2) == ["same other"]


def test_cues_for_frames_edge_cases():
    assert cues_for_frames(CUES, []) == []
    assert cues_for_frames([], [0.0, 1.0]) == ["", ""]
    assert cues_for_frames(CUES, [0.5]) == ["one two lines"]  # first frame covers the lead-in from 0 s
    with pytest.raises(ValueError):
        cues_for_frames(CUES, [0.0], frames_per_group=0)


def test_garbled_block_is_not_merged_into_the_previous_cue(caplog):
    text = ("1\n00:00:01,000 --> 00:00:02,000\nHello\n\n"
            "2\nthis is garbage --> nonsense\nWorld\n\n"
            "3\n00:00:05,000 --> 00:00:06,000\nBye\n")
    with caplog.at_level("WARNING"):
        cues = parse_srt(text)
    assert [c.text for c in cues] == ["Hello", "Bye"]
    assert "garbled" in caplog.text
