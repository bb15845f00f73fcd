"""scripts/speed_check.py: cases, the summary of cold runs, the report (no timing asserted)."""
import json
from pathlib import Path

from scripts import speed_check as sc


def _run(case, rnd, speedup, e2e, identical=True):
    return sc.Run(case=case, round=rnd, speedup=speedup, e2e_speedup=e2e, tau=3.0, tokens=20, identical=identical,
                  decode_s=1.0, vanilla_decode_s=speedup, total_s=2.0, vanilla_total_s=2.0 * e2e, wall_s=5.0)


def test_default_cases_are_the_bundled_clips_with_their_subtitles_and_the_stream_example():
    cases = sc.default_cases()
    names = [c.name for c in cases]
    assert "shapes_subtitles.mp4" in names and names[-1] == "watch-it-stream"
    sub = next(c for c in cases if c.name == "shapes_subtitles.mp4")
    assert sub.args[0] == "--srt" and Path(sub.args[1]).exists()
    stream = sc.default_cases(stream_only=True)
    assert [c.name for c in stream] == ["watch-it-stream"]
    assert stream[0].args == ("--max-new-tokens", "512", "--no-eos")


def test_summary_takes_medians_and_minimum_over_runs_and_per_case():
    runs = [_run("a", 0, 2.0, 1.5), _run("b", 0, 3.0, 2.0), _run("a", 1, 1.0, 0.8), _run("b", 1, 4.0, 3.0, False)]
    s = sc.summarise(runs)
    assert (s.runs, s.identical) == (4, 3)
    assert s.median_speedup == 2.5 and s.min_speedup == 1.0 and s.median_e2e_speedup == 1.75
    assert s.per_case["a"]["median_speedup"] == 1.5 and s.per_case["b"]["identical"] == 1
    table = sc.render(s, "Machine: test")
    assert "| a | 2 | 2 | 1.50x, 1.00x | 1.15x | 3.00 |" in table and table.endswith("Machine: test")


def test_run_once_reads_the_cli_json(monkeypatch):
    out = {"speedup": 2.5, "tau": 4.0, "tokens": 30, "identical": True, "decode_s": 0.4, "total_s": 1.0,
           "vanilla": {"decode_s": 1.0, "total_s": 1.6}}

    class Done:
        returncode, stdout, stderr = 0, json.dumps(out), ""

    monkeypatch.setattr(sc.subprocess, "run", lambda *a, **k: Done())
    r = sc.run_once(sc.Case("x", "x.mp4"), 0, [], 10.0)
    assert (r.speedup, r.e2e_speedup, r.tau, r.identical) == (2.5, 1.6, 4.0, True)
