"""A small run record with two verify steps whose last one the token budget cuts (Inspect tests)."""
from __future__ import annotations

import math

import torch

from specvlm.analysis import records as ins
from specvlm.config import DecodeConfig
from specvlm.types import DraftTreeRecord, PrefillInfo, PruneResult, StepEvent

TEXTS = {10: "A", 11: "B", 12: "X", 13: "C", 14: "D", 15: "Y", 16: "E", 17: "F", 18: "G"}


class TextTok:
    def decode(self, ids):
        return "".join(TEXTS[i] for i in ids)


def cut_record(last_ids):
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
                        TextTok().decode(last_ids), 3.0, 5.0, 5, 0.2, 4 + len(last_ids), t2)]
    cfg = DecodeConfig(method="specvlm", max_new_tokens=4 + len(last_ids))
    return ins.record_from_events(events, cfg, prompt="p", tokenizer=TextTok())
