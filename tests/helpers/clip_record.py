"""A run record over a 32-frame clip (16 token frame groups of 4x6 tokens) with thumbnails, for the Inspect tab's
frame maps in the browser tests."""
from __future__ import annotations

import numpy as np
import torch

from specvlm.analysis import records as ins
from specvlm.config import DecodeConfig
from specvlm.types import PrefillInfo, PruneResult, StepEvent, VideoClip

GROUPS, ROWS, COLS = 16, 4, 6
"""Token frame groups (two frames each) and the token grid of each."""


class _Tok:
    def decode(self, ids):
        return "".join(chr(ord("a") + i % 26) for i in ids)


def clip_record():
    """A speculative run record: 32 frames of distinct colours, Stage I and II picks in every group, 3 verify steps."""
    v = GROUPS * ROWS * COLS
    grid = torch.tensor([[g, r, c] for g in range(GROUPS) for r in range(ROWS) for c in range(COLS)])
    stage1 = torch.arange(0, v, 7)
    rest = torch.tensor([i for i in range(v) if i % 7])
    stage2 = rest[::9]
    keep = torch.sort(torch.cat([stage1, stage2])).values
    prune = PruneResult(keep, stage1, stage2, torch.linspace(0, 1, v), v, "specvlm")
    info = PrefillInfo(v + 20, v, 20 + len(keep), prune, 0.5, 0.01, 0.05, grid, 2)
    frames = np.stack([np.full((56, 84, 3), (7 * t, 120, 240 - 7 * t), np.uint8) for t in range(2 * GROUPS)])
    clip = VideoClip(frames=frames, timestamps=np.arange(2 * GROUPS) * 0.5, path="clip.mp4", native_fps=2.0,
                     total_frames=2 * GROUPS, duration=GROUPS)
    events = [info, StepEvent(0, [1], 0, [False], "b"),
              StepEvent(1, [2, 3, 4], 2, [True, True, False], "cde", 1.0, 2.0, 5, 0.1, 4),
              StepEvent(2, [5], 0, [False], "f", 1.0, 2.0, 5, 0.2, 5),
              StepEvent(3, [6, 7], 1, [True, False], "gh", 1.0, 2.0, 5, 0.3, 7)]
    return ins.record_from_events(events, DecodeConfig(method="specvlm", max_new_tokens=7), prompt="p",
                                  tokenizer=_Tok(), clip=clip)
