"""Why a step failed: the target's video attention where the draft diverged, subtitle sources."""
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
    ref = torch.stack([a[0].float().mean(0)[rows][:, inputs.video_index] for a in out.attentions]).mean(0)
    ref = ref / ref.sum(-1, keepdim=True)
    torch.testing.assert_close(got, ref, atol=2e-5, rtol=1e-3)


def test_explain_rejections_reports_the_unseen_share_and_withheld_cues(run):
    pair, inputs, res = run
    keep = res.prefill.prune.keep
    out = why.explain_rejections(pair, inputs, res.steps, keep.tolist(), tokenizer=pair.processor.tokenizer,
                                 max_steps=3, top=5)
    rej = why.rejections(res.steps)
    assert 0 < len(out) <= 3 and {w.position for w in out} <= {p for _, p, _ in rej}
    att = why.video_attention_at(pair, inputs, res.token_ids, [w.position for w in out])
    unseen = torch.ones(att.shape[1], dtype=torch.bool)
    unseen[keep] = False
    for w, row in zip(out, att):
        assert w.share_unseen == pytest.approx(float(row[unseen].sum()), abs=1e-6)
        assert len(w.top_tokens) == 5 and w.top_weights == sorted(w.top_weights, reverse=True)
        assert w.token_id == res.token_ids[w.position] and w.cue is None
    everything = why.explain_rejections(pair, inputs, res.steps, None, max_steps=1)
    assert everything[0].share_unseen == 0.0                            # a draft that saw every token
    word = out[0].word
    assert len(word) >= 2 and word.lower() not in why.STOPWORDS, word   # the first rejection: a traceable word
    cue = Cue(0.0, 1.0, f"say {word}")                                  # a cue holding the word
    withheld, seen = (why.explain_rejections(pair, inputs, res.steps, keep.tolist(), cues=[cue], draft_saw_subtitles=saw,
                                             tokenizer=pair.processor.tokenizer, max_steps=3) for saw in (False, True))
    assert withheld[0].cue == (0.0, 1.0, f"say {word}") and seen[0].cue is None
    with pytest.raises(why.WhyError):
        why.video_attention_at(pair, inputs, res.token_ids, [0])
