"""The Inspect tab on the step where the output ends (EOS / the token budget), its axis ticks and legend."""
from __future__ import annotations

from app.views import inspect_view as iv
from specvlm.analysis import records as ins

from helpers.records import cut_record


def test_last_step_is_cut_like_the_output():
    rec = cut_record([17, 18])  # the budget kept 2 of the 4 tokens the step would emit
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
    rec = cut_record([17, 18, 14, 15])  # nothing cut: 3 accepted + the target's 'Y'
    t = ins.step_tree(rec, 2)
    assert not t.ended and t.accepted_path == [0, 2, 3] and t.target_text == "Y"
    page = iv.tree_html(t)
    assert "target token" in page and ">FGD</span>" in page


def test_inspect_chart_has_whole_step_ticks_and_a_colour_legend():
    rec = cut_record([17, 18])
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
