"""The README's Python snippet runs as written (from any folder, with the bundled model and clip) and prints
the kept-token line, the streamed text, then the vanilla text and its speed, each on its own line."""
from __future__ import annotations

import os
import re
import subprocess
import sys

from helpers.fakes import ROOT


def _snippet(section: str) -> str:
    text = (ROOT / "README.md").read_text()
    body = text[text.index(section):]
    return re.search(r"```python\n(.*?)```", body, re.S).group(1)


def test_the_python_api_snippet_runs_as_written(tmp_path):
    code = _snippet("## Python API")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "SPECVLM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.rstrip("\n").split("\n")
    assert re.fullmatch(r"\d+ -> \d+", lines[0]), lines       # video tokens -> kept
    streamed, vanilla, speed = lines[1], lines[-2], lines[-1]
    assert streamed and streamed == vanilla, lines            # greedy: the same text, each on its own line
    assert re.fullmatch(r"vanilla: \d+\.\d tokens/s", speed), speed
