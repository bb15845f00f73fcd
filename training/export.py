"""Export a training checkpoint as loadable model folders (to evaluate a run while it trains).

Reads ``<work>/<phase>/ckpt.pt`` (phases ``target``, ``polish``, ``draft``) and writes
``<out>/<phase>/`` with ``save_pretrained`` weights, the run's processor and generation config, so
``training.eval_sparse`` or ``training.eval_bundled`` can load it. A checkpoint mid-phase is a model
before its learning-rate decay: expect lower numbers than the finished phase gives.

Example:
    python -m training.export --work /work/train-shapes/work --out /tmp/peek
    python -m training.eval_sparse --target /tmp/peek/target --draft /tmp/peek/target --num-videos 20 --sets long
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from training.checkpoints import Checkpointer
from training.model import DRAFT_SIZE, TARGET_SIZE, ModelSize, build_model


def export(work: Path, out: Path, phases: tuple[str, ...] = ("target", "polish", "draft")) -> dict[str, int]:
    """Write each phase's checkpoint that exists to ``out/<phase>``; returns {phase: step}."""
    from transformers import AutoProcessor, GenerationConfig

    processor = AutoProcessor.from_pretrained(str(work / "processor"))
    tok = processor.tokenizer
    done = {}
    for phase in phases:
        state = Checkpointer(work / phase).load()
        if state is None:
            continue
        size = ModelSize(**state["size"]) if "size" in state else (DRAFT_SIZE if phase == "draft" else TARGET_SIZE)
        model = build_model(tok, size, seed=0)
        model.load_state_dict(state["model"])
        model.generation_config = GenerationConfig(eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
                                                   pad_token_id=tok.pad_token_id, do_sample=False)
        dest = out / phase
        model.save_pretrained(str(dest), safe_serialization=True)
        processor.save_pretrained(str(dest))
        done[phase] = int(state["step"])
    return done


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, help="the training run's --work folder")
    ap.add_argument("--out", required=True, help="folder for <phase>/ model folders")
    args = ap.parse_args(argv)
    with torch.no_grad():
        done = export(Path(args.work), Path(args.out))
    print(", ".join(f"{p} at step {s} -> {Path(args.out) / p}" for p, s in done.items()) or "no checkpoint found")


if __name__ == "__main__":
    main()
