"""``python -m specvlm ...`` run in the test process: the exit status, stdout and stderr a subprocess would give,
without a new interpreter's torch and transformers start-up per call (:func:`helpers.media.run_cli` is the real
subprocess, for the tests of the console path itself)."""
from __future__ import annotations

import contextlib
import io
import logging
import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class CliRun:
    """What one CLI call gave: ``main``'s exit status (argparse's exit code included), stdout and stderr."""

    returncode: int
    stdout: str
    stderr: str


def cli(*args: str, **env: str) -> CliRun:
    """Run ``specvlm.cli.main(args)`` from the repository root, as ``python -m specvlm ARGS`` would.

    stdout and stderr are captured, including the ``-v`` log lines (the root logger starts without handlers, as in a
    new process, so ``main``'s ``logging.basicConfig`` writes to the captured stderr). ``SPECVLM_THREADS`` is 1
    unless ``env`` names it (no thread calibration per call). The root logger, transformers' progress-bar switch,
    torch's thread count, the environment and the working directory are restored afterwards.
    """
    import torch
    from transformers.utils import logging as hf_logging

    from specvlm.cli import main

    env = {"SPECVLM_THREADS": "1", **env}
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, torch.get_num_threads(), os.getcwd(), hf_logging.is_progress_bar_enabled())
    saved_env = {k: os.environ.get(k) for k in env}
    out, err = io.StringIO(), io.StringIO()
    root.handlers = []
    os.environ.update(env)
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:   # argparse: --help (0) and usage errors (2)
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        root.handlers, level, threads, cwd, bars = saved
        root.setLevel(level)
        torch.set_num_threads(threads)
        os.chdir(cwd)
        (hf_logging.enable_progress_bar if bars else hf_logging.disable_progress_bar)()
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return CliRun(code, out.getvalue(), err.getvalue())
