"""The benchmark end to end on tiny models, its verdict logic, and the CLI wiring."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import cli
from helpers.media import make_clip

from specvlm import bench
from specvlm.bench import goals
from specvlm.bench import report as bench_report
from specvlm.cli import bench as cli_bench
from specvlm.config import DecodeConfig, TreeConfig
from specvlm.models.pair import pair_from_models

ROOT = Path(__file__).resolve().parents[1]
N = 5
TREE = TreeConfig(depth=2, top_k=2, total_tokens=4)  # small trees keep the test fast


@pytest.fixture(scope="module")
def std_pair(qwen_tiny, qwen_tiny_draft):
    return pair_from_models(qwen_tiny[0], qwen_tiny[1], qwen_tiny_draft[0], qwen_tiny_draft[1], name="tiny Std-SD")


@pytest.fixture(scope="module")
def report(std_pair):
    cfg = DecodeConfig(max_new_tokens=N, stop_at_eos=False, tree=TREE)
    settings = bench.BenchSettings(config=cfg, repeats=2, warmup=1)  # the warm-up round measures memory
    inputs = [bench.BenchInput("clip", make_clip(4, 56), "describe this video")]
    rep = bench.run_bench(std_pair, inputs, settings)
    rep["verdict"] = bench.verdict(rep)
    return rep


def test_every_method_has_every_field(report, tmp_path):
    path = bench.write_json(report, tmp_path / "r.json")
    data = json.loads(path.read_text())
    assert [r["method"] for r in data["results"]] == list(bench.DEFAULT_METHODS)
    for r in data["results"]:
        assert set(bench.METHOD_FIELDS) <= set(r), set(bench.METHOD_FIELDS) - set(r)
    rows = {r["method"]: r for r in data["results"]}
    for m in ("vanilla", "none", "random", "uniform", "frame", "attention", "specvlm", "specvlm:self", "hf"):
        r = rows[m]
        assert r["status"] == "ok", (m, r["error"])
        assert r["num_generated"] == N and r["repeats"] == 2
        assert r["decode_tokens_per_s"] > 0 and r["e2e_s"] > 0 and r["peak_memory_mb"] > 0
        assert r["peak_memory_delta_mb"] > 0   # the tiny runs allocate activations and a KV cache
        assert r["speedup_min"] <= r["speedup"] <= r["speedup_max"]
        assert r["identical"] is True and r["divergence"] is None and len(r["speedup_runs"]) == 2
        assert r["speedup"] == pytest.approx(sum(r["speedup_runs"]) / 2, abs=1e-4)   # the median of the rounds
        assert r["target_kv_tokens"] == rows["vanilla"]["target_kv_tokens"]
    for m in ("none", "specvlm", "specvlm:self"):
        r = rows[m]
        assert r["tau"] is not None and r["draft_ms_per_step"] > 0 and r["verify_ms_per_step"] > 0
        assert r["tokens_per_target_forward"] >= 1.0 and r["verify_vs_decode_step"] > 0
    assert rows["none"]["draft_kv_tokens"] == rows["vanilla"]["target_kv_tokens"]
    assert rows["specvlm"]["draft_kv_tokens"] < rows["none"]["draft_kv_tokens"]
    assert rows["specvlm"]["draft_mode"] == "Std-SD" and rows["specvlm:self"]["draft_mode"] == "Self-SD"
    assert rows["vanilla"]["speedup"] == pytest.approx(1.0)
    # HF assisted generation runs on video inputs; prompt lookup cannot, and is reported with the reason
    assert rows["hf-assisted"]["status"] == "ok" and rows["hf-assisted"]["identical"] is True
    assert rows["prompt-lookup"]["status"] == "error"
    assert "prompt lookup copies n-grams of the prompt" in rows["prompt-lookup"]["error"]
    assert rows["prompt-lookup"]["note"] == "prompt_lookup_num_tokens=10"
    assert data["meta"]["fixed_length"] is True and "streamer" in data["meta"]["hf_timing"]
    sc = data["step_costs"]         # isolated decode vs verify(n) on the target at the prompt length
    assert sc["kv_tokens"] == rows["vanilla"]["target_kv_tokens"] and sc["decode_ms"] > 0
    assert sorted(int(n) for n in sc["ratio"]) == list(range(1, bench.VERIFY_GOAL_TOKENS + 2))
    assert all(v > 0 for v in sc["verify_ms"].values())
    mi = data["meta"]["machine"]    # calibration figures, so reports from different machines compare
    assert mi["matmul_gflops"] > 0 and mi["copy_gb_per_s"] > 0 and mi["torch_threads"] >= 1 and mi["gpu"] is None


def test_report_outputs(report, tmp_path):
    text = bench.format_report(report)
    assert "| SpecVLM (Std-SD) |" in text and "### Verdict" in text
    assert "Machine: " in text and "GFLOP/s" in text
    assert "every speculative run token-identical to vanilla" in text and "- HF peers: stock generate()" in text
    assert "### Step costs (isolated, target" in text and "| verify tokens | 1 | 2 |" in text
    statuses = {v["goal"].split(" at ")[0]: v["status"] for v in report["verdict"]}
    assert statuses["every speculative run token-identical to vanilla"] == "PASS"
    assert statuses["speedup grows with video length (sweep)"] == "SKIP"
    html = bench.write_html(report, tmp_path / "r.html").read_text()
    assert "plotly" in html and "Decode speedup" in html and "Verify forward cost vs tokens" in html


def test_synthetic_clip_and_sweep(std_pair):
    clip = bench.synthetic_clip(std_pair, 48, side=56)
    inputs = std_pair.adapter.prepare(std_pair.processor, std_pair.target, clip, "x")
    assert abs(inputs.num_video_tokens - 48) <= 4  # 4 tokens per 2-frame group at 56 px
    settings = bench.BenchSettings(methods=("vanilla", "specvlm"), config=DecodeConfig(max_new_tokens=4, tree=TREE),
                                   repeats=1, warmup=0)
    sweep = [bench.BenchInput(f"sweep-{n}", bench.synthetic_clip(std_pair, n, side=56), "describe", sweep=True)
             for n in (16, 32)]
    rep = bench.run_bench(std_pair, sweep, settings)
    pts = rep["sweep"]["specvlm"]
    assert [p["video_tokens"] for p in pts] == [16, 32] and all(p["speedup"] > 0 for p in pts)
    growth = [v for v in bench.verdict(rep) if v["goal"].startswith("speedup grows")][0]
    a, b = pts[0]["speedup"], pts[1]["speedup"]   # one round each: judged on the two medians
    assert growth["status"] == ("PASS" if b > a and b >= 0.95 * a else "FAIL")
    assert growth["detail"].startswith(f"16: {a:.2f}x, 32: {b:.2f}x")


def _fake(rows: dict, self_sd: bool = False, tokens: int = 16384) -> dict:
    base = {k: None for k in bench.METHOD_FIELDS}
    results = [base | {"input": "x", "method": m, "status": "ok", "identical": True} | r for m, r in rows.items()]
    return {"meta": {"self_sd": self_sd, "decode_config": {"tree": {"total_tokens": 16}}},
            "inputs": [{"name": "x", "num_video_tokens": tokens, "sweep": False}], "results": results, "sweep": {}}


def _clips(speedups: dict[str, list[float]], busy: bool, aa: list[float] | None = None) -> dict:
    base = {k: None for k in bench.METHOD_FIELDS}
    results = []
    for name, sp in speedups.items():
        results.append(base | {"input": name, "method": "vanilla", "status": "ok", "identical": True,
                               "vanilla_aa": aa})
        results.append(base | {"input": name, "method": "specvlm", "status": "ok", "identical": True,
                               "speedup": sorted(sp)[len(sp) // 2], "speedup_runs": sp})
    return {"meta": {"self_sd": False, "decode_config": {"tree": {"total_tokens": 8}},
                     "background_load": {"workers": 2} if busy else None},
            "inputs": [{"name": n, "num_video_tokens": 800, "sweep": False} for n in speedups],
            "results": results, "sweep": {}}


def test_clip_goals_median_and_worst_round():
    sp = {"a.mp4": [2.0, 2.2, 2.1], "b.mp4": [1.2, 1.4, 1.3], "c.mp4": [1.7, 1.6, 1.8]}
    goals = {v["goal"]: v for v in bench.verdict(_clips(sp, busy=False))}
    med = goals["median SpecVLM speedup over 3 clips >= 1.5x on an idle machine"]
    assert med["status"] == "PASS" and "median 1.70x" in med["detail"] and "b.mp4 1.30x" in med["detail"]
    assert goals["no single round of SpecVLM below 0.8x vanilla on an idle machine"]["status"] == "PASS"
    sp["b.mp4"] = [0.7, 1.1, 1.2]
    goals = {v["goal"]: v for v in bench.verdict(_clips(sp, busy=True, aa=[0.5, 1.9]))}
    worst = goals["no single round of SpecVLM below 0.8x vanilla with 2 busy background processes"]
    assert worst["status"] == "FAIL" and "worst round 0.70x over 9 rounds" in worst["detail"]
    assert "second vanilla run in the same rounds: worst 0.50x, best 1.90x" in worst["detail"]
    assert goals["median SpecVLM speedup over 3 clips >= 1.0x with 2 busy background processes"]["status"] == "PASS"
    one = _clips({"a.mp4": [2.0]}, busy=False)
    assert not [v for v in bench.verdict(one) if "clips" in v["goal"]]   # one clip: no clip goals


def test_verdict_pass_and_fail_lines():
    rows = {
        "vanilla": {"decode_tokens_per_s": 10.0, "verify_ms_per_step": 20.0, "peak_memory_delta_mb": 100.0},
        "none": {"decode_tokens_per_s": 15.0, "speedup": 1.5},
        "specvlm": {"decode_tokens_per_s": 25.0, "speedup": 2.5, "tau": 3.0, "verify_vs_decode_step": 1.2,
                    "verify_ms_per_step": 24.0},
        "specvlm:self": {"decode_tokens_per_s": 12.0, "speedup": 1.2, "peak_memory_delta_mb": 130.0,
                         "draft_kv_mb": 10.0},
        "hf": {"decode_tokens_per_s": 10.0},
        "hf-assisted": {"decode_tokens_per_s": 20.0},
    }
    got = {v["goal"].split(" at ")[0].split(" (tree")[0]: v["status"] for v in bench.verdict(_fake(rows))}
    assert got["SpecVLM Std-SD >= 2.0x decode speedup over vanilla"] == "PASS"
    assert got["SpecVLM >= 1.3x over SD-Tree with the same draft"] == "PASS"
    assert got["SpecVLM faster than HF assisted generation with the same draft"] == "PASS"
    assert got["SpecVLM Self-SD >= 1.3x over vanilla"] == "FAIL"
    assert got["verify step"] == "PASS"
    assert got["our vanilla >= 0.95x HF generate() tokens/s"] == "PASS"
    assert got["Self-SD peak memory <= vanilla peak + draft KV + 10%"] == "FAIL"
    rows["specvlm"]["identical"] = False
    rows["specvlm"]["divergence"] = {"index": 7, "kind": "mismatch", "margin": None, "threshold": 0.5, "dtype": "bfloat16"}
    lossless = bench.verdict(_fake(rows))[0]
    assert lossless["status"] == "FAIL" and "token 7" in lossless["detail"]
    only_vanilla = bench.verdict(_fake({"vanilla": rows["vanilla"]}, tokens=1024))
    assert all(v["status"] == "SKIP" for v in only_vanilla)
    rows["vanilla"]["peak_memory_delta_mb"] = None     # --warmup 0: memory not measured
    mem = [v for v in bench.verdict(_fake(rows)) if v["goal"].startswith("Self-SD peak memory")][0]
    assert mem["status"] == "SKIP" and "--warmup 1" in mem["detail"]
    rows["vanilla"]["peak_memory_delta_mb"] = 0.0      # nothing allocated above the start: no verdict either way
    mem = [v for v in bench.verdict(_fake(rows)) if v["goal"].startswith("Self-SD peak memory")][0]
    assert mem["status"] == "SKIP" and "not measurable" in mem["detail"]
    assert "goal stated at 16384" in only_vanilla[1]["goal"]


def test_verify_goal_uses_the_isolated_curve_when_measured():
    rows = {"vanilla": {"decode_tokens_per_s": 10.0, "verify_ms_per_step": 20.0},
            "specvlm": {"verify_vs_decode_step": 1.2, "verify_ms_per_step": 24.0}}
    rep = _fake(rows)

    def goal(report):
        return [v for v in bench.verdict(report) if "verify" in v["goal"]][0]

    assert goal(rep)["status"] == "PASS" and "mean verify step 24.0 ms" in goal(rep)["detail"]
    ratio = {str(n): 1.0 + n / 40 for n in range(1, 18)}           # 16 tokens: 1.40x; 17 tokens: 1.43x
    rep["step_costs"] = {"kv_tokens": 16400, "decode_ms": 10.0, "rounds": 5, "ratio": ratio,
                         "verify_ms": {n: 10.0 * r for n, r in ratio.items()}}
    g = goal(rep)
    assert g["goal"].startswith("a verify forward of up to 16 tree tokens <= 1.5x a decode step")
    assert g["status"] == "PASS" and "verify of 16 tokens 14.0 ms, 1.40x a decode step" in g["detail"]
    assert "17 tokens 1.43x" in g["detail"] and "mean verify step" in g["detail"]
    ratio["9"] = 1.7                                               # the worst size <= 16 decides
    assert goal(rep)["status"] == "FAIL" and "verify of 9 tokens" in goal(rep)["detail"]
    ratio["9"], ratio["17"] = 1.2, 3.0                             # 17 tokens is shown, not judged
    assert goal(rep)["status"] == "PASS"


def test_method_parsing():
    assert bench.parse_methods("specvlm,hf")[:1] == ("vanilla",)
    assert bench.parse_methods("all") == bench.DEFAULT_METHODS
    assert "frame:self" in bench.parse_methods("frame:self")
    for bad in ("fast", "vanilla:self", "hf:self", "", " , "):
        with pytest.raises(bench.BenchError):
            bench.parse_methods(bad)
    with pytest.raises(bench.BenchError):
        bench.parse_int_list("1024,abc")
    with pytest.raises(bench.BenchError):
        bench.run_bench(None, [], bench.BenchSettings())


def test_cli_bench_in_process(tmp_path, capsys):
    from specvlm.cli import main

    out = tmp_path / "b.json"
    rc = main(["bench", "--preset", "tiny", "--synthetic-tokens", "32", "--synthetic-side", "56", "--methods",
               "vanilla,specvlm,hf", "--depth", "2", "--repeats", "1", "--warmup", "0", "--max-new-tokens", "4",
               "--fixed-length", "--out-json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "### synthetic-32" in text and "### Verdict" in text
    data = json.loads(out.read_text())
    assert [r["method"] for r in data["results"]] == ["vanilla", "specvlm", "hf"]
    assert all(r["num_generated"] == 4 for r in data["results"])


def test_self_sd_pair_does_not_run_self_methods_twice(tmp_path, capsys):
    assert bench.drop_redundant_self(("vanilla", "specvlm", "specvlm:self", "frame:self"), True) == \
        (("vanilla", "specvlm", "frame:self"), ("specvlm:self",))
    assert bench.drop_redundant_self(("vanilla", "specvlm", "specvlm:self"), False) == \
        (("vanilla", "specvlm", "specvlm:self"), ())
    from specvlm.cli import main

    out = tmp_path / "s.json"
    rc = main(["bench", "--preset", "tiny", "--self-sd", "--synthetic-tokens", "32", "--synthetic-side", "56",
               "--methods", "vanilla,specvlm,specvlm:self", "--depth", "2", "--repeats", "1", "--warmup", "0",
               "--max-new-tokens", "4", "--fixed-length", "--no-step-costs", "--out-json", str(out)])
    assert rc == 0
    assert "specvlm:self would repeat specvlm; skipped" in capsys.readouterr().err
    data = json.loads(out.read_text())
    assert [r["method"] for r in data["results"]] == ["vanilla", "specvlm"]
    assert data["results"][1]["draft_mode"] == "Self-SD" and data["results"][1]["identical"] is True


def test_bench_help():
    res = cli("bench", "--help")
    assert res.returncode == 0, res.stderr
    for flag in ("--methods", "--sweep", "--synthetic-tokens", "--fixed-length", "--out-json", "--out-html",
                 "--preset", "--dataset"):
        assert flag in res.stdout


def test_preset_fills_only_unset_frames_and_budget():
    """An explicit 0 must reach validation (and fail there), not be replaced by the preset's value."""
    import argparse

    def ns(**kw):
        base = dict(preset="paper-qwen-self", model=None, draft=None, self_sd=False, num_frames=None,
                    max_new_tokens=None)
        return argparse.Namespace(**{**base, **kw})

    a = ns()
    s = cli_bench._apply_preset(a)
    assert (a.num_frames, a.max_new_tokens) == (s.num_frames, s.max_new_tokens)
    b = ns(num_frames=0, max_new_tokens=0)
    cli_bench._apply_preset(b)
    assert (b.num_frames, b.max_new_tokens) == (0, 0)


def test_sweep_svg_draws_every_series():
    import xml.etree.ElementTree as ET

    from specvlm.bench.charts import ChartError, sweep_svg

    sweep = {"specvlm": [{"video_tokens": 1024, "speedup": 1.1, "tau": 3.0},
                         {"video_tokens": 4096, "speedup": 1.6, "tau": 3.2},
                         {"video_tokens": 16384, "speedup": 2.2, "tau": 3.1}],
             "vanilla": [{"video_tokens": 1024, "speedup": 1.0, "tau": None},
                         {"video_tokens": 16384, "speedup": 1.0, "tau": None}]}
    text = sweep_svg(sweep, {"specvlm": "SpecVLM (Std-SD)"}, "title <&>")
    assert text == sweep_svg(sweep, {"specvlm": "SpecVLM (Std-SD)"}, "title <&>")      # deterministic
    root = ET.fromstring(text)
    ns = "{http://www.w3.org/2000/svg}"
    lines = {g.get("id"): g.find(ns + "path").get("d").split("L") for g in root.iter(ns + "g")
             if (g.get("id") or "").startswith("series:")}
    assert {k: len(v) for k, v in lines.items()} == {"series:speedup:SpecVLM (Std-SD)": 3,
                                                      "series:speedup:vanilla": 2,
                                                      "series:tau:SpecVLM (Std-SD)": 3}  # vanilla has no τ
    # higher speedup is drawn higher (smaller y) at larger x
    pts = [tuple(map(float, p.replace("M", "").split())) for p in lines["series:speedup:SpecVLM (Std-SD)"]]
    assert pts[0][0] < pts[1][0] < pts[2][0] and pts[0][1] > pts[1][1] > pts[2][1]
    assert "title &lt;&amp;&gt;" in text and ">16384<" in text and ">video tokens<" in text
    with pytest.raises(ChartError):
        sweep_svg({"vanilla": [{"video_tokens": 1024, "speedup": None, "tau": None}]})


def test_cli_sweep_writes_svg(tmp_path, capsys):
    from specvlm.cli import main

    svg = tmp_path / "sweep.svg"
    rc = main(["bench", "--preset", "tiny", "--sweep", "32,64", "--synthetic-side", "56", "--methods",
               "vanilla,specvlm", "--depth", "2", "--repeats", "1", "--warmup", "0", "--max-new-tokens", "4",
               "--fixed-length", "--out-svg", str(svg)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "- HF peers:" not in printed and "- peak memory: measured in the first (untimed) warm-up" in printed
    text = svg.read_text()
    assert "<svg" in text[:400] and text.count('id="series:') >= 3  # 2 speedup lines + 1 τ line


@pytest.mark.parametrize("fps", ["0", "-2", "nan"])
def test_bad_synthetic_fps_is_one_line_naming_the_flag(fps, capsys):
    from specvlm.cli import main

    rc = main(["bench", "--preset", "tiny", "--synthetic-tokens", "32", "--synthetic-fps", fps])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("error: --synthetic-fps=") and "--synthetic---" not in err[-1]


@pytest.mark.parametrize("flag", ["--sweep", "--synthetic-tokens"])
def test_empty_length_list_is_an_error_not_the_default(flag, capsys):
    from specvlm.cli import main

    rc = main(["bench", "--preset", "tiny", flag, ""])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith(f"error: {flag} '' names no length")
    rc = main(["bench", "--preset", "tiny", flag, "256,256"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith(f"error: {flag} '256,256' repeats a length")


def _growth(series: list[tuple[int, list[float]]]) -> dict:
    import statistics

    pts = [{"video_tokens": v, "speedup": statistics.median(r), "speedup_runs": r} for v, r in series]
    return goals._growth_goal({"sweep": {"specvlm": pts}})


def test_growth_is_judged_on_the_trend_of_per_round_speedups():
    lengths = (1024, 2048, 4096, 8192, 16384)
    noisy_up = [(v, [1.5 + 0.2 * i + d for d in (-0.3, 0.0, 0.25)]) for i, v in enumerate(lengths)]
    noisy_up[2] = (4096, [1.4, 1.6, 2.2])         # a neighbour drop of the medians, inside the noise
    g = _growth(noisy_up)
    assert g["status"] == "PASS" and "trend +0.20x per doubling" in g["detail"] and "2048->4096" in g["detail"]
    assert "one-sided permutation p = 0.00" in g["detail"]
    flat_tree = [{"video_tokens": v, "speedup": 1.5, "speedups": [1.4, 1.5, 1.6]} for v in lengths]   # an older report
    pts = [{"video_tokens": v, "speedup": sorted(r)[1], "speedups": r} for v, r in noisy_up]
    g = goals._growth_goal({"sweep": {"specvlm": pts, "none": flat_tree}})
    assert g["status"] == "PASS" and "SD-Tree (no pruning) for contrast: +0.00x per doubling (p = " in g["detail"]
    same = [(4096, [1.0, 1.1, 1.2]), (4096, [1.5, 1.6, 1.7])]        # two inputs rounding to one length
    assert _growth(same)["status"] == "SKIP" and "distinct lengths" in _growth(same)["detail"]
    flat = [(v, [1.5 + d for d in ((-0.3, 0.0, 0.3) if i % 2 else (0.3, 0.0, -0.3))]) for i, v in enumerate(lengths)]
    flat[-1] = (16384, [1.21, 1.51, 1.81])       # the longest a hair faster than the shortest: not enough
    assert _growth(flat)["status"] == "FAIL"
    down = [(v, [2.5 - 0.2 * i + d for d in (-0.1, 0.0, 0.1)]) for i, v in enumerate(lengths)]
    assert _growth(down)["status"] == "FAIL"
    one_round = [(v, [1.0 + 0.1 * i]) for i, v in enumerate(lengths)]   # too few rounds: strict neighbour rule
    g = _growth(one_round)
    assert g["status"] == "PASS" and "no drop > 5% between neighbours" in g["detail"]
    one_round[2] = (4096, [1.0])
    assert _growth(one_round)["status"] == "FAIL"


def test_speedup_trend_slope_p_value_and_bad_input():
    est, p = bench.speedup_trend([(1024, [1.0, 1.1, 0.9]), (4096, [1.4, 1.5, 1.3])])   # +0.4x over 2 doublings
    assert est == pytest.approx(0.2) and p < 0.1                      # 1 of 20 assignments is this extreme
    est, p = bench.speedup_trend([(1024, [1.4, 1.5, 1.3]), (4096, [1.0, 1.1, 0.9])])
    assert est == pytest.approx(-0.2) and p > 0.9
    pts = [(1, [1.0, 2.0]), (2, [1.5, 2.5])]
    assert bench.speedup_trend(pts, seed=3) == bench.speedup_trend(pts, seed=3)          # repeatable
    for bad in ([(1024, [1.0])], [(1024, [1.0]), (2048, [])], [(1024, [1.0]), (1024, [2.0])]):
        with pytest.raises(ValueError):
            bench.speedup_trend(bad)


def test_bad_round_counts_name_their_flags(capsys):
    from specvlm.cli import main

    rc = main(["bench", "--preset", "tiny", "--repeats", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("error: --repeats=0 and --warmup=1")


TINY_RUN = ["bench", "--preset", "tiny", "--synthetic-side", "56", "--methods", "vanilla,specvlm", "--depth", "2",
            "--repeats", "1", "--warmup", "0", "--max-new-tokens", "4", "--fixed-length", "--no-step-costs"]


@pytest.mark.parametrize("extra, message", [
    (["--synthetic-tokens", "32", "--out-json", "{tmp}"], "error: --out-json {tmp}: is a folder"),
    (["--synthetic-tokens", "32", "--out-html", "{tmp}/a_file/r.html"], "error: --out-html {tmp}/a_file/r.html: cannot write"),
    (["--synthetic-tokens", "32", "--out-svg", "{tmp}/s.svg"], "error: --out-svg plots the length sweep: add --sweep"),
    (["--synthetic-tokens", "32", "--synthetic-side", "5"], "error: --synthetic-side 5: give a frame side of at least 56"),
    (["--synthetic-tokens", "32", "--prompt", " "], "error: --prompt is empty"),
    (["--sweep", "99999999"], "error: 99999999 video tokens: the target's max_position_embeddings is 32768"),
    (["--sweep", "3"], "error: 3 video tokens: the smallest generated clip for this model gives 4"),
])
def test_bad_bench_arguments_fail_before_any_run(extra, message, tmp_path, capsys):
    """Output paths, frame side, prompt and token counts are refused up front, in one line naming the input."""
    from specvlm.cli import main

    (tmp_path / "a_file").write_text("not a folder")
    extra = [e.format(tmp=tmp_path) for e in extra]
    rc = main(TINY_RUN + extra)
    captured = capsys.readouterr()
    assert rc == 2 and captured.err.strip().splitlines()[-1].startswith(message.format(tmp=tmp_path))
    assert "round 1/1" not in captured.err and "Traceback" not in captured.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]  # the write check leaves nothing behind


def test_a_failed_write_after_the_run_keeps_the_other_outputs(tmp_path, capsys, monkeypatch):
    from specvlm.cli import main

    def disk_full(report, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bench_report, "write_json", disk_full)
    html = tmp_path / "r.html"
    rc = main(TINY_RUN + ["--synthetic-tokens", "32", "--out-json", str(tmp_path / "r.json"), "--out-html", str(html)])
    captured = capsys.readouterr()
    assert rc == 1 and "error: JSON not written to" in captured.err and "No space left" in captured.err
    assert "### Verdict" in captured.out and html.stat().st_size > 1000


def test_ctrl_c_is_one_line_not_a_traceback(capsys, monkeypatch):
    from specvlm.cli import main

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_bench, "cmd_bench", interrupted)
    assert main(TINY_RUN + ["--synthetic-tokens", "32"]) == 130
    assert capsys.readouterr().err.strip() == "interrupted: bench stopped before the end; nothing more was written."


def test_sampling_runs_skip_the_identity_goal_and_say_so(capsys):
    from specvlm.cli import main

    rc = main(TINY_RUN + ["--synthetic-tokens", "32", "--temperature", "0.8", "--seed", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "sampling at temperature 0.8" in out.splitlines()[0]
    assert "| n/a (sampling) |" in out
    assert "SKIP  every speculative run token-identical to vanilla: sampling (temperature 0.8)" in out


def test_unused_settings_get_a_note(capsys):
    from specvlm.cli import main

    rc = main(TINY_RUN + ["--synthetic-tokens", "32", "--num-frames", "4", "--tree", "static", "--min-prob", "0.3"])
    err = capsys.readouterr().err
    assert rc == 0 and "note: --num-frames / --fps sample video files" in err
    assert "note: --min-prob has no effect on a static tree" in err


def test_noisy_step_costs_are_flagged():
    report = {"meta": {"pair": "p", "device": "cpu", "dtype": "float32", "max_new_tokens": 4, "fixed_length": True,
                       "repeats": 1, "warmup": 0, "methods": ["vanilla"], "speedup": "s", "peak_memory": "m",
                       "decode_config": {"sampling": {"temperature": 0.0}}},
              "inputs": [], "results": [], "verdict": [],
              "step_costs": {"kv_tokens": 100, "decode_ms": 1.0, "rounds": 1, "ratio": {"1": 1.0, "8": 0.14}}}
    assert "WARNING: a verify forward read 0.14x a decode step" in bench.format_report(report)
    report["step_costs"]["ratio"]["8"] = 1.3
    assert "a verify forward read" not in bench.format_report(report)


def test_video_notes_reach_the_bench_log(tmp_path, capsys):
    """What decoding changed (here: a 16 px wide video enlarged to the model's 28 px minimum) is said once."""
    from helpers.media import write_video

    from specvlm.cli import main

    path = tmp_path / "narrow.mp4"
    write_video(path, n=8, w=16, h=64, fps=8)
    rc = main(TINY_RUN[:3] + ["--video", str(path)] + TINY_RUN[5:])
    err = capsys.readouterr().err
    assert rc == 0 and err.count("note: narrow.mp4: upscaled 16x64 -> 32x128 px") == 1


def test_the_library_never_imports_the_cli():
    """specvlm.bench (and every module it pulls in) stays usable without the command line: no import cycle."""
    code = ("import sys, specvlm.bench, specvlm.bench.goals, specvlm.bench.report; "
            "print(sorted(m for m in sys.modules if m.startswith('specvlm.cli') or m == 'specvlm.__main__'))")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_goals_stated_at_16k_are_skipped_not_failed_on_shorter_inputs():
    rows = {"vanilla": {"decode_tokens_per_s": 10.0, "verify_ms_per_step": 20.0, "peak_memory_delta_mb": 100.0},
            "none": {"decode_tokens_per_s": 11.0, "speedup": 1.1},
            "specvlm": {"decode_tokens_per_s": 12.0, "speedup": 1.2, "tau": 3.0, "verify_vs_decode_step": 2.0,
                        "verify_ms_per_step": 40.0},
            "specvlm:self": {"decode_tokens_per_s": 11.0, "speedup": 1.1, "peak_memory_delta_mb": 105.0,
                             "draft_kv_mb": 1.0},
            "hf": {"decode_tokens_per_s": 5.0}, "hf-assisted": {"decode_tokens_per_s": 20.0}}

    def statuses(tokens):
        return {v["goal"].split(" at ")[0].split(" (tree")[0]: v for v in bench.verdict(_fake(rows, tokens=tokens))}

    long = statuses(16384)
    stated = ["SpecVLM Std-SD >= 2.0x decode speedup over vanilla", "SpecVLM >= 1.3x over SD-Tree with the same draft",
              "SpecVLM faster than HF assisted generation with the same draft", "SpecVLM Self-SD >= 1.3x over vanilla",
              "verify step"]
    assert [long[g]["status"] for g in stated] == ["FAIL"] * 5
    assert statuses(16100)["verify step"]["status"] == "FAIL"          # within a frame group of 16k: judged
    short = statuses(4096)
    for g in stated:
        assert short[g]["status"] == "SKIP", g
        assert short[g]["detail"].startswith("not judged: stated at 16384 video tokens and the largest input has "
                                             "4096 (add --synthetic-tokens 16384")
    assert "measured here: speedup 1.20x, tau 3.00" in short[stated[0]]["detail"]
    # goals that hold at any length are still judged
    assert short["every speculative run token-identical to vanilla"]["status"] == "PASS"
    assert short["our vanilla >= 0.95x HF generate() tokens/s"]["status"] == "PASS"
    assert short["Self-SD peak memory <= vanilla peak + draft KV + 10%"]["status"] == "PASS"
    assert "goal stated at" not in short["our vanilla >= 0.95x HF generate() tokens/s"]["goal"]
    assert not any(v["status"] == "FAIL" for v in short.values())


def test_lossless_goal_fails_only_on_a_mismatch():
    import torch

    from specvlm.bench.protocol import identity

    van = {"token_ids": [1, 2, 3, 4], "margins": [5.0, 0.1, 5.0, 5.0]}
    flip = {"token_ids": [1, 9, 3, 4]}                  # differs where the target's top two were 0.1 apart
    late = {"token_ids": [1, 2, 7, 4]}                  # differs where the target was sure (margin 5)
    near = identity([(flip, van)], torch.bfloat16, [1.5, 2.0])   # the one comparison schema (Comparison.to_json)
    assert near == {"identical": False, "speedup": 1.75, "speedup_runs": [1.5, 2.0],
                    "divergence": {"index": 1, "kind": "near-tie", "margin": 0.1, "threshold": 0.5, "dtype": "bfloat16"}}
    assert identity([(flip, van)], torch.float32)["divergence"]["kind"] == "mismatch"   # fp32: no tie that wide
    worst = identity([(flip, van), (late, van), (dict(van), van)], torch.bfloat16)      # the worst round decides
    assert worst["divergence"]["kind"] == "mismatch" and worst["divergence"]["index"] == 2 and not worst["identical"]
    assert identity([(dict(van), van)], torch.float32)["divergence"] is None
    assert identity([(dict(van), van)], torch.float32)["identical"] is True

    rows = {"vanilla": {}, "specvlm": {"identical": False} | {k: near[k] for k in ("divergence", "speedup_runs")}}
    lossless = bench.verdict(_fake(rows))[0]
    assert lossless["status"] == "PASS" and "near-tie at token 1 (margin 0.1, allowed)" in lossless["detail"]
    # a row of an older report, with flat keys
    rows["none"] = {"identical": False, "first_divergence": 2, "divergence_margin": 5.0, "divergence_kind": "mismatch"}
    lossless = bench.verdict(_fake(rows))[0]
    assert lossless["status"] == "FAIL" and "none@x: mismatch at token 2 (margin 5)" in lossless["detail"]
    assert bench_report._identity_cell(_fake(rows)["results"][1]) == "near-tie (token 1, margin 0.1)"


def _gone(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process, from /proc/<pid>/stat (Linux)."""
    import os

    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_background_load_starts_busy_workers_and_always_stops_them():
    import time

    from specvlm.bench.load import BackgroundLoad

    with BackgroundLoad(2, max_s=60) as load:
        pids = load.pids
        assert len(pids) == 2 and load.alive() == 2
        deadline, seen = time.monotonic() + 20, 0.0
        while seen < 0.05 and time.monotonic() < deadline:    # until the workers have really spun
            seen = sum(_cpu_seconds(p) for p in pids)
            time.sleep(0.02)
        assert seen >= 0.05
    assert all(_gone(p) for p in pids) and load.pids == () and load.alive() == 0
    assert load.summary.workers == 2 and load.summary.cpu_s >= seen and load.summary.wall_s > 0
    for exc in (KeyboardInterrupt, RuntimeError):      # Ctrl-C or an error inside the block
        with pytest.raises(exc):
            with BackgroundLoad(1, max_s=60) as load:
                pids = load.pids
                raise exc()
        assert all(_gone(p) for p in pids)
    with BackgroundLoad(1, max_s=0.2) as load:         # a worker also ends by itself at its time limit
        deadline = time.monotonic() + 20
        while load.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert load.alive() == 0
    with BackgroundLoad(0) as load:
        assert load.pids == ()
    assert load.summary is None
    with pytest.raises(ValueError):
        BackgroundLoad(-1)


def test_cli_bench_background_load_and_threads_reach_the_machine_line(tmp_path, capsys):
    from specvlm.cli import main

    out = tmp_path / "b.json"
    rc = main(TINY_RUN + ["--synthetic-tokens", "32", "--background-load", "2", "--threads", "1",
                          "--out-json", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0
    line = next(x for x in printed.splitlines() if x.startswith("Machine: "))
    assert "torch threads 1 of " in line and "set by --threads" in line
    assert "background load: 2 busy worker processes (pure-Python spin) during the rounds" in line
    meta = json.loads(out.read_text())["meta"]
    assert meta["threads"]["threads"] == 1 and meta["threads"]["describe"] in line
    load = meta["background_load"]
    assert load["workers"] == 2 and load["cpu_s"] > 0 and len(load["pids"]) == 2
    results = json.loads(out.read_text())["results"]
    van = next(r for r in results if r["method"] == "vanilla")
    assert len(van["vanilla_aa"]) == van["repeats"] and all(x > 0 for x in van["vanilla_aa"])   # run-to-run noise
    assert "vanilla again: " in printed
    assert all(r["threads_per_round"] == [1] * r["repeats"] for r in results)
    assert all(_gone(p) for p in load["pids"])          # nothing left behind
    assert main(TINY_RUN + ["--synthetic-tokens", "32", "--background-load", "-1"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: --background-load=-1")


def test_host_reads_are_counted_per_decode_step_for_every_method(report):
    rows = {r["method"]: r for r in report["results"]}
    assert "engine" not in report["meta"] and "vanilla_engine" not in report["meta"]   # one engine
    for m in ("vanilla", "specvlm", "specvlm:self", "hf"):
        r = rows[m]
        assert r["host_reads_per_step"] > 0, m    # every loop reads its step's tokens on the host
        assert sum(r["host_reads_by_kind"].values()) == pytest.approx(r["host_reads_per_step"])
    assert rows["vanilla"]["host_read_steps"] == N - 1 and rows["hf"]["host_read_steps"] == N - 1
    assert 1 <= rows["specvlm"]["host_read_steps"] <= N - 1
    assert rows["hf"]["label"] == "model.generate() (HF, the paper's baseline)"
    text = bench_report.format_report(report)
    assert "host reads/step" in text and "engine" not in text.splitlines()[0]
    assert "| model.generate() (HF, the paper's baseline) |" in text


def test_host_reads_start_after_the_first_token(monkeypatch):
    import torch

    from specvlm.bench import hostreads
    from specvlm.types import StepEvent

    t = torch.ones(3)

    def fake_stream(pair, inputs, config):
        t.tolist(); t.tolist(); t.tolist()        # prefill reads: not counted
        yield "prefill info"
        t.sum().item()                            # the first token's read: before the reset
        yield StepEvent(0, [1], 0, [False], "a")
        for step in (1, 2):
            t.sum().item(); bool(t[0] > 0)        # two reads per decode step
            yield StepEvent(step, [1], 0, [False], "b")

    monkeypatch.setattr("specvlm.engine.stream.stream", fake_stream)
    got = hostreads.ours(None, None, DecodeConfig(method="vanilla"))
    assert got == {"host_reads_per_step": 2.0, "host_reads_by_kind": {"bool": 1.0, "item": 1.0}, "host_read_steps": 2}
    none = hostreads.per_step(hostreads.HostReadCounter(), 0)
    assert none == {"host_reads_per_step": None, "host_reads_by_kind": None, "host_read_steps": 0}


def test_every_method_runs_with_the_benched_settings(std_pair, monkeypatch):
    from specvlm.bench import runners

    seen = []
    real = __import__("specvlm.engine.stream", fromlist=["generate"]).generate

    def spy(pair, inputs, cfg, **kw):
        seen.append((cfg.method, cfg.max_new_tokens))
        return real(pair, inputs, cfg, **kw)

    monkeypatch.setattr("specvlm.engine.stream.generate", spy)
    from specvlm.engine.prepare import prepare

    inputs = prepare(std_pair, make_clip(4, 56), "describe this video")
    cfg = DecodeConfig(max_new_tokens=3, stop_at_eos=False, tree=TREE)
    for m in ("vanilla", "specvlm", "specvlm:self"):
        assert runners.run_ours(std_pair, m, inputs, cfg)["status"] == "ok"
    assert seen == [("vanilla", 3), ("specvlm", 3), ("specvlm", 3)]


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[1] / "docs" / "bench").glob("*.json")),
                         ids=lambda p: p.name)
def test_the_published_reports_still_render(path):
    """The reports under docs/bench (some written before the comparison schema) give a table and a verdict."""
    report = json.loads(path.read_text())
    text = bench_report.format_report(report)
    assert "| method |" in text and "identical to vanilla |" in text
    kinds = [goals.divergence_kind(r) for r in report["results"] if r["method"] != "vanilla"]
    assert kinds and set(kinds) <= {"identical", "near-tie", "mismatch", None}
    assert {v["status"] for v in bench.verdict(report)} <= {"PASS", "FAIL", "SKIP"}
