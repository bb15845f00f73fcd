"""Export training checkpoints and finished models as loadable, shippable model folders.

Two jobs:
- ``--work``: each phase's checkpoint (``<work>/<phase>/ckpt.pt``, phases ``target``, ``polish``, ``draft``) to
  ``<out>/<phase>/`` with ``save_pretrained`` weights, the run's processor and generation config, so
  ``training.eval_sparse`` or ``training.eval_bundled`` can load a run while it trains. A checkpoint mid-phase is
  a model before its learning-rate decay: expect lower numbers than the finished phase gives.
- ``--model``: a finished model folder to ``<out>`` in another on-disk dtype (``--dtype bfloat16`` halves the
  files that ship in ``assets/``; the library upcasts to float32 when it loads them on a CPU). The folder's
  processor, training info and loss curve come along. Evaluate the exported folder, not the source: its weights
  are the rounded ones.

Examples:
    python -m training.export --work /work/train-shapes/work --out /tmp/peek
    python -m training.eval_sparse --target /tmp/peek/target --draft /tmp/peek/target --num-videos 20 --sets long
    python -m training.export --model runs/large/model/target --out assets/model_large/target --dtype bfloat16
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch

from training.checkpoints import Checkpointer
from training.model import DRAFT_SIZE, TARGET_SIZE, ModelSize, build_model

CARRIED = ("training_info.json", "loss_curve.png")
"""Files of a model folder that :func:`ship` copies as they are."""


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


def ship(src: Path, out: Path, dtype: torch.dtype) -> int:
    """Copy the model folder ``src`` to ``out`` with its weights stored in ``dtype``; returns the weights' bytes.

    Raises:
        FileNotFoundError: no model at ``src``.
    """
    from transformers import AutoModelForImageTextToText, AutoProcessor

    if not (src / "config.json").exists():
        raise FileNotFoundError(f"--model {src}: no model there (config.json missing)")
    model = AutoModelForImageTextToText.from_pretrained(str(src), dtype=torch.float32).to(dtype)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    AutoProcessor.from_pretrained(str(src)).save_pretrained(str(out))
    for name in CARRIED:
        if (src / name).exists():
            shutil.copyfile(src / name, out / name)
    return sum(f.stat().st_size for f in out.glob("*.safetensors"))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--work", help="the training run's --work folder (export its checkpoints)")
    src.add_argument("--model", help="a finished model folder (ship it in --dtype)")
    ap.add_argument("--out", required=True, help="folder for <phase>/ model folders, or the shipped model folder")
    ap.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="bfloat16",
                    help="on-disk dtype with --model")
    args = ap.parse_args(argv)
    with torch.no_grad():
        if args.model:
            size = ship(Path(args.model), Path(args.out), getattr(torch, args.dtype))
            print(f"{args.model} -> {args.out} ({args.dtype}, {size / 2**20:.1f} MiB of weights)")
            return
        done = export(Path(args.work), Path(args.out))
    print(", ".join(f"{p} at step {s} -> {Path(args.out) / p}" for p, s in done.items()) or "no checkpoint found")


if __name__ == "__main__":
    main()
