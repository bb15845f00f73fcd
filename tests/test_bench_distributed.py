"""The benchmark over two gloo ranks (torchrun) on a tiny pair and a small VideoDetailCaption-layout dataset:
the merged report equals a single process's, a failing input is recorded, a dead rank ends the job with its
records kept, and --resume measures only the rest."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pytest

from specvlm.bench.distributed import BenchError, RankInfo, RankRecords, local_ranks, shard

ROOT = Path(__file__).resolve().parents[1]
IDS = [f"v_{i:03d}" for i in range(6)]
SAMPLES = 4   # seeded subset of the 6 rows, as the paper's evaluation samples a subset
COMPARED = ("input", "method", "status", "token_ids", "text", "num_generated", "tau", "tokens_per_target_forward",
            "identical", "num_video_tokens", "num_kept", "target_kv_tokens", "draft_kv_tokens", "repeats")


def write_mp4(path: Path, frames: np.ndarray, fps: int = 8) -> None:
    """uint8 (T, H, W, 3) frames as an H.264 mp4."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as out:
        st = out.add_stream("libx264", rate=fps)
        st.width, st.height, st.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
        for f in frames:
            for pkt in st.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                out.mux(pkt)
        for pkt in st.encode():
            out.mux(pkt)


def make_vdc(root: Path) -> Path:
    """A VideoDetailCaption copy in the public layout: a parquet of (video_name, question, answer) and
    ``evaluation/Test_Videos/<video_name>.mp4``; every clip differs (moving bar, seeded colours)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"video_name": IDS, "question": [f"Describe video {i} in detail." for i in range(len(IDS))],
                      "answer": [f"Clip {i}." for i in range(len(IDS))]})
    (root / "test").mkdir(parents=True, exist_ok=True)
    pq.write_table(table, root / "test" / "test-00000-of-00001.parquet")
    for i, name in enumerate(IDS):
        rng = np.random.default_rng(i)
        frames = np.repeat(rng.integers(0, 255, (1, 56, 56, 3), dtype=np.uint8), 8, axis=0)
        for t in range(8):
            frames[t, :, 7 * t:7 * t + 7] = 255 - frames[t, :, 7 * t:7 * t + 7]
        write_mp4(root / "evaluation" / "Test_Videos" / f"{name}.mp4", frames)
    return root


def bench_args(data: Path, out: Path) -> list[str]:
    return ["bench", "--preset", "tiny", "--self-sd", "--dataset", "vdc", "--data-root", str(data), "--num-samples",
            str(SAMPLES), "--num-frames", "4", "--methods", "vanilla,none,specvlm", "--depth", "2",
            "--repeats", "1", "--warmup", "0", "--max-new-tokens", "5", "--fixed-length", "--no-step-costs",
            "--threads", "1", "--out-json", str(out)]


def torchrun(args: list[str], script: str = "-m specvlm", env: dict | None = None) -> subprocess.CompletedProcess:
    """Two CPU ranks on this machine (gloo), rendezvous on a free port."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           *script.split(), *args]
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=240)


def rows(report: dict) -> list[dict]:
    return [{k: r[k] for k in COMPARED} for r in report["results"]]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_vdc(tmp_path_factory.mktemp("vdc"))


@pytest.fixture(scope="module")
def single(data, tmp_path_factory) -> dict:
    from specvlm.cli import main

    out = tmp_path_factory.mktemp("single") / "single.json"
    assert main(bench_args(data, out)) == 0
    return json.loads(out.read_text())


def test_two_gloo_ranks_merge_into_the_single_process_report(data, single, tmp_path):
    out = tmp_path / "two.json"
    run = torchrun(bench_args(data, out))
    assert run.returncode == 0, run.stderr[-3000:]
    merged = json.loads(out.read_text())
    names = [i["name"] for i in single["inputs"]]
    assert len(names) == SAMPLES and merged["inputs"] == single["inputs"]
    assert rows(merged) == rows(single)   # same inputs, token-identical outputs, same τ
    assert all(r["status"] == "ok" for r in merged["results"])
    taus = {r["method"]: r["tau"] for r in merged["results"]}
    assert taus["none"] > 0 and taus["specvlm"] is not None   # Self-SD drafts that get accepted: τ says something
    ranks = merged["meta"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and merged["meta"]["world_size"] == 2
    assert ranks[0]["inputs"] == names[0::2] and ranks[1]["inputs"] == names[1::2]
    assert set(merged["meta"]) == set(single["meta"]) | {"ranks", "world_size", "resumed"}
    assert run.stdout.count("Machine (rank ") == 2 and "### Verdict" in run.stdout
    lines = [json.loads(x) for x in (tmp_path / "two.ranks" / "rank-1.jsonl").read_text().splitlines()]
    assert [e["name"] for e in lines] == names[1::2]


def test_a_failed_input_is_recorded_a_dead_rank_named_and_resume_finishes(data, single, tmp_path):
    out = tmp_path / "r.json"
    names = [i["name"] for i in single["inputs"]]
    faults = {"SPECVLM_TEST_RAISE_ON": names[1], "SPECVLM_TEST_DIE_ON": names[3],   # both on rank 1, which dies
              "SPECVLM_TEST_DIE_AFTER": str(tmp_path / "r.ranks" / "rank-0.jsonl")}    # once rank 0 kept an input
    run = torchrun(bench_args(data, out), script="tests/bench_rank_faults.py", env=faults)
    assert run.returncode != 0 and not out.exists()
    assert "rank: 1" in run.stderr and "exitcode: 3" in run.stderr   # torchrun's failure summary names it
    kept = [json.loads(x) for x in (tmp_path / "r.ranks" / "rank-1.jsonl").read_text().splitlines()]
    assert [e["name"] for e in kept] == [names[1]]
    assert kept[0]["input"]["error"] == f"RuntimeError: injected failure on {names[1]}"
    assert [r["status"] for r in kept[0]["rows"]] == ["error"] * 3

    run = torchrun(bench_args(data, out) + ["--resume"])
    assert run.returncode == 0, run.stderr[-3000:]
    merged = json.loads(out.read_text())
    assert rows(merged) == rows(single)   # the failed input was measured again, the dead rank's share too
    resumed = merged["meta"]["resumed"]
    measured = [n for r in merged["meta"]["ranks"] for n in r["inputs"]]
    assert names[0] in resumed and names[1] not in resumed
    assert sorted(resumed + measured) == sorted(names)


def test_shard_rank_environment_and_records(tmp_path):
    assert shard(list(range(7)), 1, 3) == [1, 4] and shard(list(range(2)), 2, 3) == []
    assert RankInfo.from_env({}) is None
    env = {"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    assert RankInfo.from_env(env) == RankInfo(3, 4, 1, 2) and local_ranks(env) == 2 and local_ranks({}) == 1
    with pytest.raises(BenchError, match="contradict"):
        RankInfo.from_env({**env, "RANK": "4"})
    store = RankRecords(tmp_path, 0, "run-a")
    store.append({"index": 0, "name": "a", "input": {"name": "a"}, "rows": []})
    store.append({"index": 1, "name": "b", "input": {"name": "b", "error": "VideoError: bad"}, "rows": []})
    RankRecords(tmp_path, 1, "run-b").append({"index": 2, "name": "c", "input": {"name": "c"}, "rows": []})
    with open(tmp_path / "rank-1.jsonl", "a") as f:
        f.write('{"index": 3, "name": "d", "inp')   # a rank killed mid-line
    assert list(store.finished()) == ["a"]   # failed input retried, other settings and the cut line skipped
    store.clear(local_rank=0)
    assert not list(tmp_path.glob("rank-*.jsonl"))


def test_ranks_on_one_machine_split_its_cpus():
    import torch

    from specvlm.runtime import threads

    choice = threads.configure(share=2, environ={})
    try:
        assert choice.threads == max(1, choice.usable // 2) == torch.get_num_threads()
        assert "shared by 2 ranks" in choice.reason and threads.adapt() is None   # no per-request policy
    finally:
        torch.set_num_threads(1)


def test_one_process_keeps_records_and_resumes_without_torchrun(data, single, tmp_path):
    from specvlm.cli import main

    out, records = tmp_path / "one.json", tmp_path / "records"
    args = bench_args(data, out) + ["--records-dir", str(records)]
    assert main(args + ["--distributed"]) == 0
    first = json.loads(out.read_text())
    assert rows(first) == rows(single) and first["meta"]["ranks"][0]["inputs"] == [i["name"] for i in single["inputs"]]
    assert main(args + ["--resume"]) == 0   # everything finished: nothing is measured again
    again = json.loads(out.read_text())
    assert rows(again) == rows(single) and again["meta"]["ranks"][0]["inputs"] == []
    assert again["meta"]["resumed"] == [i["name"] for i in single["inputs"]]


def test_an_unreadable_video_is_a_failed_input_and_the_others_are_measured(data, single, tmp_path, capsys):
    import shutil

    from specvlm.cli import main

    bad = shutil.copytree(data, tmp_path / "vdc")
    names = [i["name"] for i in single["inputs"]]
    (bad / "evaluation" / "Test_Videos" / f"{names[2]}.mp4").write_bytes(b"\x00not a video" * 100)
    out = tmp_path / "bad.json"
    assert main(bench_args(bad, out) + ["--distributed", "--no-step-costs"]) == 0
    report = json.loads(out.read_text())
    failed = report["inputs"][2]
    assert failed["name"] == names[2] and "VideoFormatError" in failed["error"] and failed["num_video_tokens"] is None
    assert [r["status"] for r in report["results"] if r["input"] == names[2]] == ["error"] * 3
    good = [r for r in rows(report) if r["input"] != names[2]]
    assert good == [r for r in rows(single) if r["input"] != names[2]]
    assert f"### {names[2]}: failed: VideoFormatError" in capsys.readouterr().out
