"""Why a step failed: the target's attention over its input where the draft diverged, subtitle sources."""
import copy
from types import SimpleNamespace as NS

import pytest
import torch

from helpers.media import make_clip

from specvlm.analysis import why
from specvlm.config import DecodeConfig, PruneConfig
from specvlm.engine.stream import generate
from specvlm.engine.prepare import prepare
from specvlm.text.subtitles import Cue
from specvlm.types import DraftTreeRecord


def _step(step, accepted, n_tokens, parents=None, path=None, first_token=0):
    tree = None if parents is None else DraftTreeRecord([0] * len(parents), parents, [0.0] * len(parents), path, 0)
    return NS(step=step, accept_length=accepted, token_ids=list(range(first_token, first_token + n_tokens)), tree=tree)


def test_rejections_are_refused_draft_continuations_only():
    steps = [_step(0, 0, 1),                                           # the prefill token
             _step(1, 0, 1, [-1, 0], []),                              # refused at the root: position 1
             _step(2, 3, 4, [-1, 0, 1], [0, 1, 2], first_token=10),    # whole path accepted: none
             _step(3, 1, 2, [-1, 0, 1], [0], first_token=20),          # refused after one: position 7
             _step(4, 0, 1)]                                           # no tree, nothing accepted: position 8
    assert why.rejections(steps) == [(1, 1, 0), (3, 7, 21), (4, 8, 0)]
    as_dict = [NS(**{**vars(s), "tree": None if s.tree is None else vars(s.tree)}) for s in steps]
    assert why.rejections(as_dict) == why.rejections(steps)             # trees read back as plain dicts too


def test_word_and_subtitle_cue_of_a_step():
    pieces = ["red", " circle", ".", " code", " 4", "2", ".", " plain"]
    assert why.word_at(pieces, 4) == "42" and why.word_at(pieces, 5) == "42" and why.word_at(pieces, 3) == "code"
    cues = [Cue(0.0, 1.0, "Keep watching."), Cue(2.0, 3.5, "The code is 42.")]
    assert why.cue_with("42", cues) == (2.0, 3.5, "The code is 42.")
    assert why.cue_with("code", cues)[2] == "The code is 42."
    assert why.cue_with("the", cues) is None and why.cue_with("plain", cues) is None


@pytest.fixture(scope="module")
def run(pairs):
    pair = pairs[("qwen", "std")]
    clip = make_clip(num_frames=8, side=112)
    inputs = prepare(pair, clip, "Describe the video.")
    cfg = DecodeConfig(method="specvlm", max_new_tokens=24, prune=PruneConfig(drop_rate=0.75))
    return pair, inputs, generate(pair, inputs, cfg, record_trees=True)


def test_attention_rows_equal_the_eager_attention_of_the_whole_sequence(run):
    pair, inputs, res = run
    rej = why.rejections(res.steps)
    assert rej, "the tiny draft should fail somewhere"
    positions = [p for _, p, _ in rej if p >= 1][:3]
    got = why.video_attention_at(pair, inputs, res.token_ids, positions)
    model = copy.deepcopy(pair.target)   # transformers' own eager attention, on a copy: the pair stays as built
    n = max(positions)
    ids = torch.cat([inputs.input_ids, torch.tensor([res.token_ids[:n]])], 1)
    gen = (inputs.next_position + torch.arange(n)).expand(inputs.positions.shape[0], n)
    pos = torch.cat([inputs.positions, gen], 1)[:, None, :]             # the engine's positions
    model.set_attn_implementation({"text_config": "eager"})
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=pos, output_attentions=True,
                    **{k: v for k, v in inputs.vision.items()})
    L = inputs.input_ids.shape[1]
    rows = torch.tensor([L + p - 1 for p in positions])
    whole = torch.stack([a[0].float().mean(0)[rows] for a in out.attentions]).mean(0)    # (P, L + n)
    ref = whole[:, inputs.video_index] / whole[:, inputs.video_index].sum(-1, keepdim=True)
    torch.testing.assert_close(got, ref, atol=2e-5, rtol=1e-3)
    torch.testing.assert_close(why.input_attention_at(pair, inputs, res.token_ids, positions), whole,
                               atol=2e-5, rtol=1e-3)                     # the rows over the whole input too


def test_the_segments_split_every_input_position_once():
    L, n = 12, 3
    inputs = NS(input_ids=torch.zeros(1, L, dtype=torch.long), video_index=torch.arange(2, 8),
                subtitle_mask=torch.tensor([False] * 8 + [True] * 2 + [False] * 2))
    inputs.for_target = lambda: inputs
    masks = why.segment_masks(inputs, [1, 4], n)
    assert list(masks) == list(why.SEGMENTS)
    assert torch.stack(list(masks.values())).sum(0).tolist() == [1] * (L + n)    # a partition
    assert masks["video_kept"].nonzero().flatten().tolist() == [3, 6]
    assert masks["video_pruned"].nonzero().flatten().tolist() == [2, 4, 5, 7]
    assert masks["transcript"].nonzero().flatten().tolist() == [8, 9]
    assert masks["question"].nonzero().flatten().tolist() == [10, 11]
    assert masks["prompt_other"].nonzero().flatten().tolist() == [0, 1]
    assert masks["text_so_far"].nonzero().flatten().tolist() == [12, 13, 14]
    row = torch.zeros(L + n)
    row[[0, 3, 8, 9, 13]] = torch.tensor([0.1, 0.2, 0.3, 0.3, 0.1])
    shares = why.attention_shares(row, masks)
    assert shares == pytest.approx({"video_kept": 0.2, "video_pruned": 0.0, "transcript": 0.6, "question": 0.0,
                                    "prompt_other": 0.1, "text_so_far": 0.1})


def test_the_explanation_is_the_largest_part_and_only_one_the_draft_missed():
    base = dict.fromkeys(why.SEGMENTS, 0.0)
    transcript = base | {"transcript": 0.6, "video_pruned": 0.3, "video_kept": 0.1}
    assert why.explanation(transcript, draft_saw_subtitles=False) == "withheld_transcript"
    assert why.explanation(transcript, draft_saw_subtitles=True) == "seen_input"      # the draft read it too
    pruned = base | {"video_pruned": 0.5, "transcript": 0.4, "question": 0.1}
    assert why.explanation(pruned, draft_saw_subtitles=False) == "pruned_video"
    assert why.explanation(pruned, pruned=False) == "seen_input"
    assert why.explanation(base | {"video_kept": 0.4, "video_pruned": 0.3, "transcript": 0.3}, False) == "seen_input"


def test_explain_rejections_reports_the_unseen_share_and_withheld_cues(run):
    pair, inputs, res = run
    keep = res.prefill.prune.keep
    out = why.explain_rejections(pair, inputs, res.steps, keep.tolist(), max_steps=3, top=5)
    rej = why.rejections(res.steps)
    assert 0 < len(out) <= 3 and {w.position for w in out} <= {p for _, p, _ in rej}
    att = why.video_attention_at(pair, inputs, res.token_ids, [w.position for w in out])
    unseen = torch.ones(att.shape[1], dtype=torch.bool)
    unseen[keep] = False
    for w, row in zip(out, att):
        assert w.share_unseen == pytest.approx(float(row[unseen].sum()), abs=1e-6)
        assert len(w.top_tokens) == 5 and w.top_weights == sorted(w.top_weights, reverse=True)
        assert w.token_id == res.token_ids[w.position] and w.cue is None
        assert set(w.shares) == set(why.SEGMENTS) and sum(w.shares.values()) == pytest.approx(1.0, abs=1e-4)
        video = w.shares["video_kept"] + w.shares["video_pruned"]
        assert w.shares["video_pruned"] == pytest.approx(w.share_unseen * video, abs=1e-4)   # the same row
        assert w.shares["transcript"] == 0.0 and w.explanation == why.explanation(w.shares)
    everything = why.explain_rejections(pair, inputs, res.steps, None, max_steps=1)
    assert everything[0].share_unseen == 0.0                            # a draft that saw every token
    word = out[0].word
    assert len(word) >= 2 and word.lower() not in why.STOPWORDS, word   # the first rejection: a traceable word
    cue = Cue(0.0, 1.0, f"say {word}")                                  # a cue holding the word
    withheld, seen = (why.explain_rejections(pair, inputs, res.steps, keep.tolist(), cues=[cue], draft_saw_subtitles=saw, max_steps=3) for saw in (False, True))
    assert withheld[0].cue == (0.0, 1.0, f"say {word}") and seen[0].cue is None
    with pytest.raises(why.WhyError):
        why.video_attention_at(pair, inputs, res.token_ids, [0])
