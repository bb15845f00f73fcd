"""Subtitles in the prompt: cue-to-frame alignment, prompt construction for both families,
subtitle modes (both / target / draft / none) and losslessness with subtitles."""
from __future__ import annotations

import pytest
import torch

from helpers.media import make_clip

from specvlm.config import DecodeConfig, TreeConfig
from specvlm.engine.stream import generate
from specvlm.engine.prefill import prefill_target
from specvlm.engine.forward import prompt_video
from specvlm.text.prompting import (SUBTITLE_MODES, SubtitleLine, SubtitlePromptError, subtitle_block, subtitle_lines,
                                    user_text)
from specvlm.text.subtitles import Cue
from specvlm.engine.prepare import prepare

PROMPT = "describe this video in detail"
# unordered and overlapping (frames at 0, 0.25, ..., 1.75 s with make_clip(): 8 frames at 4 fps)
CUES = [Cue(0.6, 1.2, "the number seven"), Cue(0.0, 0.4, "hello world"), Cue(0.3, 0.9, "red circle")]


# ---------------------------------------------------------------- alignment (pure)
def test_lines_per_frame_with_overlapping_unordered_cues():
    ts = [0.0, 0.25, 0.5, 0.75, 1.0, 1.25]
    lines = subtitle_lines(CUES, ts, 1)  # frame i stands for [t_i, t_i+1)
    assert lines == [
        SubtitleLine(0, 0, 0.0, 0.0, "hello world"),                  # red circle starts at .3
        SubtitleLine(1, 1, 0.25, 0.25, "hello world red circle"),     # both overlap: start order
        SubtitleLine(2, 3, 0.5, 0.75, "red circle the number seven"),  # same text twice: merged
        SubtitleLine(4, 4, 1.0, 1.0, "the number seven"),
    ]
    plain = subtitle_lines(CUES, ts, 1, merge_repeats=False)
    assert [x.first_group for x in plain] == [0, 1, 2, 3, 4]  # frame 5 (1.25-1.5 s) has no cue


def test_two_frame_groups_attach_the_cues_of_both_frames():
    ts = [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5]  # odd T: last group has one frame
    lines = subtitle_lines(CUES, ts, 2)
    assert [(x.first_group, x.text) for x in lines] == [
        (0, "hello world red circle"),                    # frames 0 + 1 -> [0, .5)
        (1, "red circle the number seven"),               # frames 2 + 3 -> [.5, 1.0)
        (2, "the number seven"),                          # frames 4 + 5 -> [1.0, 1.5)
    ]
    assert lines[1].start_s == 0.5  # the group's first frame time
    assert subtitle_lines(list(reversed(CUES)), ts, 2) == lines  # order of cues does not matter


def test_block_format_and_user_text():
    block = subtitle_block(CUES, [0.0, 0.25, 0.5, 0.75], 2)
    assert block == "Subtitles:\n[t=0.0s] hello world red circle\n[t=0.5s] red circle the number seven\n"
    merged = SubtitleLine(2, 4, 1.0, 2.0, "x").render()
    assert merged == "[t=1.0-2.0s] x"
    assert subtitle_block([], [0.0]) == "" and subtitle_block(None, [0.0]) == ""
    assert subtitle_block([Cue(10, 11, "late")], [0.0, 1.0]) == ""  # no cue overlaps a frame
    assert user_text("  \nwhat?", block) == block + "what?"
    assert user_text("  what?", "") == "  what?"


# ---------------------------------------------------------------- prompt construction
@pytest.mark.parametrize("fam", ["qwen", "llava"])
def test_prompt_with_subtitles_keeps_video_tokens_and_marks_the_transcript(pairs, fam):
    pair = pairs[(fam, "self")]
    clip = make_clip()
    plain = pair.adapter.prepare(pair.processor, pair.target, clip, PROMPT)
    inp = pair.adapter.prepare(pair.processor, pair.target, clip, PROMPT, subtitles=CUES, subtitle_mode="both")
    tok = pair.processor.tokenizer
    assert inp.num_video_tokens == plain.num_video_tokens
    assert torch.equal(inp.video_index, plain.video_index)  # transcript comes after the video
    assert torch.equal(inp.token_grid, plain.token_grid)
    assert inp.num_subtitle_tokens > 0 and inp.subtitle_mask.shape == (inp.input_ids.shape[1],)
    assert tok.decode(inp.input_ids[0][inp.subtitle_mask]) == inp.subtitle_text
    assert inp.subtitle_text.startswith("Subtitles:\n[t=0.0s] hello world")
    idx = inp.subtitle_mask.nonzero().flatten()
    assert int(idx[-1] - idx[0]) + 1 == idx.numel() and int(idx[0]) > int(inp.video_index[-1])
    # the video placeholder count still matches the video features: embeds + a real forward
    emb, _ = prompt_video(pair.target, pair.adapter, inp)
    assert emb.shape[1] == inp.input_ids.shape[1]
    tp = prefill_target(pair, inp, with_scores=True)
    assert tp.scores.shape == (inp.num_video_tokens,) and torch.isfinite(tp.scores).all()
    if fam == "qwen":  # video M-RoPE positions unchanged; transcript continues after the video
        assert torch.equal(inp.positions[:, inp.video_index], plain.positions[:, plain.video_index])
        first = int(idx[0])
        assert int(inp.positions[0, first]) == int(inp.positions[:, :first].max()) + 1
        assert inp.next_position == plain.next_position + inp.num_subtitle_tokens


def test_qwen_subtitled_prompt_matches_hf_generate(pairs):
    """Positions over the full subtitled prompt are right: vanilla equals HF generate on its text."""
    pair = pairs[("qwen", "self")]
    clip = make_clip()
    inp = pair.adapter.prepare(pair.processor, pair.target, clip, PROMPT, subtitles=CUES)
    enc = pair.processor(text=[inp.prompt_text], videos=[clip.frames], do_sample_frames=False,
                         video_metadata=[{"fps": 4.0, "total_num_frames": 8, "frames_indices": list(range(8))}],
                         return_tensors="pt")
    assert torch.equal(enc["input_ids"], inp.input_ids)
    out = pair.target.generate(**enc, max_new_tokens=16, min_new_tokens=16, do_sample=False)
    van = generate(pair, inp, DecodeConfig(method="vanilla", max_new_tokens=16, stop_at_eos=False))
    assert out[0, enc["input_ids"].shape[1]:].tolist() == van.token_ids


@pytest.mark.parametrize("fam", ["qwen", "llava"])
def test_draft_mode_target_view_equals_the_prompt_without_subtitles(pairs, fam):
    pair = pairs[(fam, "self")]
    clip = make_clip()
    plain = pair.adapter.prepare(pair.processor, pair.target, clip, PROMPT)
    inp = pair.adapter.prepare(pair.processor, pair.target, clip, PROMPT, subtitles=CUES, subtitle_mode="draft")
    tv = inp.for_target()
    assert torch.equal(tv.input_ids, plain.input_ids)
    assert torch.equal(tv.positions, plain.positions)
    assert torch.equal(tv.video_index, plain.video_index)
    assert tv.prompt_text == plain.prompt_text and tv.num_subtitle_tokens == 0
    for mode in ("both", "target"):
        other = pair.adapter.prepare(pair.processor, pair.target, clip, PROMPT, subtitles=CUES, subtitle_mode=mode)
        assert other.for_target() is other
    none = pair.adapter.prepare(pair.processor, pair.target, clip, PROMPT, subtitles=CUES, subtitle_mode="none")
    assert torch.equal(none.input_ids, plain.input_ids) and none.subtitle_mask is None


def test_bad_mode_is_refused(pairs):
    pair = pairs[("qwen", "self")]
    with pytest.raises(SubtitlePromptError, match="subtitle_mode"):
        pair.adapter.prepare(pair.processor, pair.target, make_clip(), PROMPT, subtitles=CUES, subtitle_mode="all")
    assert set(SUBTITLE_MODES) == {"both", "target", "draft", "none"}


# ---------------------------------------------------------------- losslessness
def _cfg(method, n=24, shape="dynamic"):
    return DecodeConfig(method=method, max_new_tokens=n, stop_at_eos=False, tree=TreeConfig(shape=shape))


@pytest.mark.parametrize("fam", ["qwen", "llava"])
def test_speculative_equals_vanilla_in_every_subtitle_mode(pairs, fam):
    clip = make_clip()
    for kind in ("self", "std"):
        pair = pairs[(fam, kind)]
        for mode in ("both", "target", "draft"):
            inp = pair.adapter.prepare(pair.processor, pair.target, clip, PROMPT, subtitles=CUES, subtitle_mode=mode)
            van = generate(pair, inp, _cfg("vanilla"))
            spec = generate(pair, inp, _cfg("specvlm"))
            assert spec.token_ids == van.token_ids, (kind, mode)
            p = spec.prefill
            n = inp.num_subtitle_tokens
            assert (p.target_subtitle_tokens, p.draft_subtitle_tokens) == {
                "both": (n, n), "target": (n, 0), "draft": (0, n)}[mode]
            kept = p.prune.num_kept
            text_len = inp.input_ids.shape[1] - inp.num_video_tokens
            assert p.num_draft_prompt_tokens == text_len + kept - (n if mode == "target" else 0)
            assert p.num_prompt_tokens == inp.input_ids.shape[1] - (n if mode == "draft" else 0)


def test_draft_mode_output_equals_plain_vanilla(pairs):
    """The target never sees the transcript in 'draft' mode: same output as without subtitles."""
    pair = pairs[("qwen", "self")]
    clip = make_clip()
    plain = generate(pair, prepare(pair, clip, PROMPT), _cfg("vanilla"))
    spec = generate(pair, prepare(pair, clip, PROMPT, subtitles=CUES, subtitle_mode="draft"),
                    _cfg("specvlm", shape="chain"))
    assert spec.token_ids == plain.token_ids


def test_self_sd_draft_seeing_everything_accepts_full_paths_with_subtitles(pairs):
    """Method 'none' + mode 'both': the Self-SD draft equals the target, so positions after the
    transcript agree exactly (every drafted chain token is accepted)."""
    pair = pairs[("qwen", "self")]
    cfg = DecodeConfig(method="none", max_new_tokens=25, stop_at_eos=False, tree=TreeConfig(shape="chain", depth=4))
    res = generate(pair, prepare(pair, make_clip(), PROMPT, subtitles=CUES, subtitle_mode="both"), cfg)
    assert res.accept_lengths[:-1] == [4] * (len(res.accept_lengths) - 1)


def test_no_transcript_note_only_when_no_cue_overlaps_a_sampled_frame():
    from specvlm.text.prompting import no_transcript_note
    from specvlm.text.subtitles import Cue

    ts = [0.0, 0.5, 1.0, 1.5]  # frames stand for 0-2.0 s (the last lasts one 0.5 s gap)
    late = [Cue(2.1, 3.0, "after the clip"), Cue(5.0, 6.0, "later still")]
    note = no_transcript_note(late, ts)
    assert note == ("no subtitle cue overlaps the video's sampled frames (0-2.0 s; the first cue starts at "
                    "2.1 s), so no transcript was added")
    assert no_transcript_note([Cue(1.9, 3.0, "in the last frame's span")], ts) is None
    assert no_transcript_note([], ts) is None and no_transcript_note(None, ts) is None
