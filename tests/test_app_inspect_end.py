"""The Inspect tab on the step where the output ends (EOS / the token budget), its axis ticks and legend."""
from __future__ import annotations

import math

import torch

from app import inspect_view as iv
from specvlm.analysis import records as ins
from specvlm.config import DecodeConfig
from specvlm.types import DraftTreeRecord, PrefillInfo, PruneResult, StepEvent

TEXTS = {10: "A", 11: "B", 12: "X", 13: "C", 14: "D", 15: "Y", 16: "E", 17: "F", 18: "G"}


class _Tok:
    def decode(self, ids):
        return "".join(TEXTS[i] for i in ids)


def _record(last_ids):
    """Step 1 emits 'B' 'C' + target 'E'; step 2's tree has accepted path 'F' 'G' 'D' + target 'Y', of which
    the output keeps only ``last_ids`` (the budget ran out inside the step)."""
    lt = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
    pr = PruneResult(lt([0, 3]), lt([0]), lt([3]), torch.tensor([0.5, 0.1, 0.1, 0.3]), 4, "specvlm")
    info = PrefillInfo(20, 4, 18, pr, 0.1, 0.01, 0.02, lt([[0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 1, 1]]), 2)
    lp = [math.log(.6), math.log(.3), math.log(.6 * .5), math.log(.6 * .5 * .5), math.log(.6 * .5 * .25)]
    t1 = DraftTreeRecord([11, 12, 13, 14, 15], [-1, -1, 0, 2, 2], lp, [0, 2], 16)
    t2 = DraftTreeRecord([17, 12, 18, 14, 11], [-1, -1, 0, 2, 2], lp, [0, 2, 3], 15)
    n_acc = min(3, len(last_ids))
    events = [info, StepEvent(0, [10], 0, [False], "A"),
              StepEvent(1, [11, 13, 16], 2, [True, True, False], "BCE", 4.0, 6.0, 5, 0.1, 4, t1),
              StepEvent(2, list(last_ids), n_acc, [i < n_acc for i in range(len(last_ids))],
                        _Tok().decode(last_ids), 3.0, 5.0, 5, 0.2, 4 + len(last_ids), t2)]
    cfg = DecodeConfig(method="specvlm", max_new_tokens=4 + len(last_ids))
    return ins.record_from_events(events, cfg, prompt="p", tokenizer=_Tok())


def test_last_step_is_cut_like_the_output():
    rec = _record([17, 18])  # the budget kept 2 of the 4 tokens the step would emit
    t = ins.step_tree(rec, 2)
    assert t.ended and t.accept_length == 2 and t.accepted_path == [0, 2]
    assert [n.text for n in t.nodes if n.accepted] == ["F", "G"]          # 'D' (node 3) is past the end
    assert not any(n.diverged for n in t.nodes) and t.diverged_at is None
    page = iv.tree_html(t)
    assert "accepted text: <span" in page and ">FG</span>" in page
    assert "output ended here" in page and "target token" not in page
    assert rec.text.endswith("FG")  # the header, the path and the accepted text agree with the output
    assert "".join(n.text for n in t.nodes if n.accepted) == rec.steps[-1].text


def test_full_last_step_still_shows_the_target_token():
    rec = _record([17, 18, 14, 15])  # nothing cut: 3 accepted + the target's 'Y'
    t = ins.step_tree(rec, 2)
    assert not t.ended and t.accepted_path == [0, 2, 3] and t.target_text == "Y"
    page = iv.tree_html(t)
    assert "target token" in page and ">FGD</span>" in page


def test_inspect_chart_has_whole_step_ticks_and_a_colour_legend():
    rec = _record([17, 18])
    fig = iv.accept_chart(rec)
    assert fig.layout.xaxis.tickformat == "d" and fig.layout.xaxis.dtick == 1
    assert list(fig.layout.xaxis.range) == [0.5, 2.5]                    # no empty ticks before the first step
    most = max(2, rec.settings["tree"]["depth"])                          # every length the chart can show
    assert fig.layout.yaxis.dtick == (1 if most <= 8 else 2)
    legend = [t for t in fig.data if t.showlegend and t.legendgroup == "colours"]
    top = min(most, len(iv.ACCEPT_COLOURS) - 1)
    assert [t.name for t in legend] == [str(n) for n in range(top)] + [f"{top}+" if most > top else str(top)]
    assert [t.marker.color for t in legend] == iv.ACCEPT_COLOURS[:top + 1]
    bars = fig.data[0]
    assert list(bars.x) == [1, 2] and [c[2] for c in bars.customdata] == [2, 2]
    assert iv._dtick(40) == 4 and iv._dtick(3) == 1
