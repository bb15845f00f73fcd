"""Resumable phase state and the final saved models (safetensors, processor, loss curve)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch

class Checkpointer:
    """Resumable training state in ``<work>/<phase>/ckpt.pt`` (atomic replace)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.path = folder / "ckpt.pt"
        folder.mkdir(parents=True, exist_ok=True)

    def load(self):
        return torch.load(self.path, weights_only=False) if self.path.exists() else None

    def save(self, state: dict) -> None:
        tmp = self.path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.path)


def save_final(model, processor, out_dir: Path, losses, title: str, info: dict) -> None:
    """save_pretrained (safetensors) + processor + generation config + loss plot + train info."""
    from transformers import GenerationConfig

    out_dir.mkdir(parents=True, exist_ok=True)
    tok = processor.tokenizer
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    model.generation_config = GenerationConfig(
        eos_token_id=eos, pad_token_id=tok.pad_token_id, do_sample=False, max_new_tokens=128)
    model.config.text_config.eos_token_id = eos
    model.config.text_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(str(out_dir), safe_serialization=True)
    processor.save_pretrained(str(out_dir))
    tok_cfg = out_dir / "tokenizer_config.json"   # a processor loaded offline records how it was loaded: drop it
    cfg = json.loads(tok_cfg.read_text())
    if [cfg.pop(k) for k in ("is_local", "local_files_only") if k in cfg]:
        tok_cfg.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
    save_loss_plot(out_dir / "loss_curve.png", losses, title)
    (out_dir / "training_info.json").write_text(json.dumps(info, indent=1))


def save_loss_plot(path: Path, losses: list[tuple[int, float]], title: str) -> None:
    """Write a small PNG line plot of (step, loss) with PIL (no plotting deps)."""
    from PIL import Image, ImageDraw

    W, H, m = 640, 360, 40
    img = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(img)
    d.text((m, 8), title, fill="black")
    losses = [(s, v) for s, v in losses if np.isfinite(v)]
    if len(losses) >= 2:
        steps = np.array([s for s, _ in losses], float)
        vals = np.log10(np.maximum(np.array([v for _, v in losses], float), 1e-4))
        k = max(1, len(vals) // 100)
        sm = np.convolve(vals, np.ones(k) / k, mode="valid")
        st = steps[k - 1:]
        lo, hi = float(sm.min()), float(sm.max()) + 1e-9
        xs = m + (st - st[0]) / max(st[-1] - st[0], 1) * (W - 2 * m)
        ys = H - m - (sm - lo) / (hi - lo) * (H - 2 * m)
        d.line(list(zip(xs.tolist(), ys.tolist())), fill=(30, 90, 200), width=2)
        d.rectangle([m, m, W - m, H - m], outline="gray")
        d.text((m, H - m + 5), f"step {int(st[0])}", fill="black")
        d.text((W - m - 80, H - m + 5), f"step {int(st[-1])}", fill="black")
        d.text((2, m - 12), f"loss {10 ** hi:.3g}", fill="black")
        d.text((2, H - m + 14), f"loss {10 ** lo:.3g} (log scale, smoothed {k})", fill="black")
    img.save(path)
