"""The CLI on tiny checkpoints saved with save_pretrained (model + processor), run in-process (helpers.cli);
tests/test_bundled_model.py runs ``python -m specvlm`` as a real subprocess."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.cli import cli
from helpers.media import write_mp4

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, qwen_tiny, llava_tiny):
    root = tmp_path_factory.mktemp("ckpt")
    out = {}
    for name, (model, proc) in {"qwen": qwen_tiny, "llava": llava_tiny}.items():
        d = root / name
        model.save_pretrained(d)
        proc.save_pretrained(d)
        out[name] = d
    x = np.linspace(0, 255, 112, dtype=np.uint8)
    frames = np.stack([np.stack([np.roll(x, 7 * t)[None, :].repeat(112, 0), x[:, None].repeat(112, 1),
                                 np.full((112, 112), 30 * t % 255, np.uint8)], -1) for t in range(16)])
    out["video"] = write_mp4(root / "clip.mp4", frames)
    return out


@pytest.mark.parametrize("fam", ["qwen", "llava"])
def test_cli_json_vanilla_equals_specvlm(checkpoints, fam):
    common = ["generate", "--model", str(checkpoints[fam]), "--video", str(checkpoints["video"]),
              "--prompt", "describe this video", "--num-frames", "8", "--max-new-tokens", "40", "--no-eos", "--json"]
    outs = {}
    for method in ("vanilla", "specvlm"):
        r = cli(*common, "--method", method)
        assert r.returncode == 0, r.stderr
        outs[method] = json.loads(r.stdout)
    for key in ("text", "token_ids", "method", "num_video_tokens", "num_kept", "tau", "tokens_per_target_forward",
                "decode_s", "total_s", "tokens_per_s", "accept_lengths", "stage1", "stage2"):
        assert key in outs["specvlm"], key
    assert outs["vanilla"]["token_ids"] == outs["specvlm"]["token_ids"]
    assert len(outs["specvlm"]["token_ids"]) == 40
    s = outs["specvlm"]
    assert s["num_kept"] == max(1, int(s["num_video_tokens"] * 0.1 + 1e-9))
    assert len(s["stage1"]) + len(s["stage2"]) == s["num_kept"]


def test_cli_errors_are_readable(checkpoints, tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("not a video")
    r = cli("generate", "--model", str(checkpoints["qwen"]), "--video", str(bad), "--prompt", "hi")
    assert r.returncode == 2
    assert "error:" in r.stderr and "notes.txt" in r.stderr
    r = cli("generate", "--model", str(checkpoints["qwen"]), "--video", str(checkpoints["video"]),
                "--drop-rate", "1.5")
    assert r.returncode == 2 and "--drop-rate=1.5" in r.stderr      # named by its flag
    r = cli("generate", "--model", str(checkpoints["qwen"]), "--video", str(checkpoints["video"]),
                "--min-prob", "1")
    assert r.returncode == 2 and "--min-prob=1.0 is out of range" in r.stderr
    r = cli("generate", "--model", str(tmp_path / "missing"), "--video", str(checkpoints["video"]))
    assert r.returncode == 2 and "does not exist" in r.stderr
    # settings and the video path are checked before any model is loaded
    r = cli("-v", "generate", "--model", str(tmp_path / "missing"), "--video", str(tmp_path / "nope.mp4"))
    assert r.returncode == 2 and "nope.mp4: no such file" in r.stderr and "loading" not in r.stderr
    r = cli("-v", "generate", "--model", str(tmp_path / "missing"), "--video", str(checkpoints["video"]),
                "--num-frames", "0")
    assert r.returncode == 2 and "--num-frames=0" in r.stderr and "loading" not in r.stderr
    r = cli("-v", "generate", "--model", str(checkpoints["qwen"]), "--video", str(checkpoints["video"]),
            "--num-frames", "4", "--max-new-tokens", "1")
    assert r.returncode == 0 and "loading target" in r.stderr     # what -v shows once a model does load
    # a file that is no video, a folder, an empty prompt, contradicting flags: refused before any model loads
    r = cli("generate", "-v", "--model", str(checkpoints["qwen"]), "--video", str(bad))
    assert r.returncode == 2 and "notes.txt" in r.stderr and "loading" not in r.stderr.lower()
    r = cli("generate", "--model", str(tmp_path / "missing"), "--video", str(tmp_path))
    assert r.returncode == 2 and "is a folder" in r.stderr
    r = cli("generate", "--model", str(tmp_path / "missing"), "--video", str(checkpoints["video"]), "--prompt", " ")
    assert r.returncode == 2 and "--prompt is empty" in r.stderr
    r = cli("generate", "--self-sd", "--draft", "x", "--video", str(checkpoints["video"]))
    assert r.returncode == 2 and "contradict" in r.stderr


def test_cli_subtitles_reach_the_prompt_and_notes_are_printed(checkpoints, tmp_path):
    srt = tmp_path / "clip.srt"
    srt.write_text("1\n00:00:00,000 --> 00:00:01,000\nA red ball rolls.\n\n"
                   "2\n00:00:01,000 --> 00:00:02,000\nIt stops.\n")
    base = ["generate", "--model", str(checkpoints["qwen"]), "--video", str(checkpoints["video"]),
            "--prompt", "describe this video", "--num-frames", "8", "--max-new-tokens", "12", "--no-eos", "--json"]
    plain = json.loads(cli(*base).stdout)
    r = cli(*base, "--srt", str(srt), "--compare")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert plain["target_subtitle_tokens"] == 0
    assert out["target_subtitle_tokens"] > 5 and out["draft_subtitle_tokens"] == out["target_subtitle_tokens"]
    assert out["num_prompt_tokens"] == plain["num_prompt_tokens"] + out["target_subtitle_tokens"]
    assert out["identical"] is True                        # lossless with the transcript too
    assert out["divergence"] is None and out["speedup"] > 0 and out["speedup_runs"] == [out["speedup"]]
    assert "engine" not in out and "vanilla_engine" not in out
    # with re-selection too (the vanilla it is compared with runs without it)
    out = json.loads(cli(*base, "--compare", "--reselect").stdout)
    assert out["identical"] is True
    # target only: the draft's prompt skips the transcript
    out = json.loads(cli(*base, "--srt", str(srt), "--subtitle-mode", "target").stdout)
    assert out["target_subtitle_tokens"] > 5 and out["draft_subtitle_tokens"] == 0
    # a malformed file names itself; --subtitle-mode alone is refused; both frame settings are refused
    bad = tmp_path / "bad.srt"
    bad.write_bytes(b"\x00\x01\x02binary")
    r = cli(*base, "--srt", str(bad))
    assert r.returncode == 2 and "bad.srt" in r.stderr and "Traceback" not in r.stderr
    r = cli(*base, "--subtitle-mode", "draft")
    assert r.returncode == 2 and "--srt" in r.stderr
    r = cli(*base, "--fps", "2")
    assert r.returncode == 2 and "not allowed with argument" in r.stderr
    # cues outside the sampled frames, or an empty file: said, not silent
    late = tmp_path / "late.srt"
    late.write_text("1\n01:00:00,000 --> 01:00:02,000\nmuch later\n")
    r = cli(*base, "--srt", str(late))
    assert r.returncode == 0 and "no --srt cue overlaps the video's sampled frames (0-2.1 s; the first cue starts at 3600.0 s)" in r.stderr
    assert json.loads(r.stdout)["target_subtitle_tokens"] == 0
    empty = tmp_path / "empty.srt"
    empty.write_text("")
    r = cli(*base, "--srt", str(empty))
    assert r.returncode == 0 and "has no subtitle cues" in r.stderr
    r = cli(*base, "--srt", str(tmp_path / "missing.srt"))
    assert r.returncode == 2 and "--srt: " in r.stderr and "missing.srt" in r.stderr
    # asking for more frames than the clip has (16) is said, not silent
    r = cli(*[a if a != "8" else "40" for a in base])
    assert r.returncode == 0 and "note: the video has only 16 frame(s)" in r.stderr
    assert json.loads(r.stdout)["notes"]
    # an early stop on a static tree (fixed shape) is said, not silently ignored
    r = cli(*base, "--tree", "static", "--min-prob", "0.5")
    assert r.returncode == 0 and "--min-prob has no effect on a static tree" in r.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-CUDA default preset (bundled pair) is what runs here")
def test_clip_shorter_than_the_preset_default_is_not_a_stderr_note():
    # the README's first example: 16-frame clip, bundled preset default 32 frames, nothing asked
    r = cli("generate", "--video", str(ROOT / "assets/videos/shapes_short.mp4"), "--max-new-tokens", "4",
                "--json")
    assert r.returncode == 0, r.stderr
    assert "has only" not in r.stderr                                       # not news: nothing was asked
    assert any("has only 16 frame(s)" in n for n in json.loads(r.stdout)["notes"])   # still on record


def test_cli_help():
    r = cli("generate", "--help")
    assert r.returncode == 0 and "--drop-rate" in r.stdout and "--tree" in r.stdout


def test_cli_bad_device_and_zero_budget_are_readable(checkpoints, tmp_path):
    base = ["generate", "--model", str(checkpoints["qwen"]), "--video", str(checkpoints["video"]), "--prompt", "hi"]
    import torch

    if not torch.cuda.is_available():
        r = cli(*base, "--device", "cuda")
        assert r.returncode == 2 and "CUDA is not available" in r.stderr and "Traceback" not in r.stderr
    r = cli(*base, "--max-new-tokens", "0")
    assert r.returncode == 2 and "--max-new-tokens=0" in r.stderr
    r = cli(*base, "--num-frames", "0")
    assert r.returncode == 2 and "--num-frames=0" in r.stderr
    r = cli("generate", "--model", str(tmp_path / "nope" / "model"), "--video", str(checkpoints["video"]))
    assert r.returncode == 2 and "does not exist" in r.stderr


def test_a_model_that_is_a_preset_target_keeps_the_preset_defaults(tmp_path):
    import argparse

    from specvlm.cli.args import preset_of, resolve_models
    from specvlm.models.presets import BUNDLED_TARGET, PRESETS

    args = argparse.Namespace(model=str(BUNDLED_TARGET), draft=None, self_sd=False)
    target, draft, preset = resolve_models(args)
    assert target == str(BUNDLED_TARGET) and draft is None            # Self-SD unless --draft is given
    assert preset is not None and preset.num_frames == 32 and preset.max_new_tokens == 128
    assert preset_of("Qwen/Qwen2.5-VL-7B-Instruct").num_frames == 128
    assert preset_of(str(tmp_path)) is None and preset_of("someone/other-model") is None
    assert all(preset_of(p.target) is not None for p in PRESETS.values())
    assert all(preset_of(p.target, p.draft) is p for p in PRESETS.values())  # target and draft name one preset
    from specvlm.models.presets import SPARSE_DRAFT, SPARSE_SELF, SPARSE_STD, SPARSE_TARGET

    for self_sd, draft, name in ((True, None, SPARSE_SELF), (False, None, SPARSE_SELF),
                                 (False, str(SPARSE_DRAFT), SPARSE_STD)):
        args = argparse.Namespace(model=str(SPARSE_TARGET), draft=draft, self_sd=self_sd)
        assert resolve_models(args)[2].name == name                      # the pair that runs picks the tree


def _generate_args(*extra: str):
    from specvlm.cli import build_parser

    return build_parser().parse_args(["generate", "--video", "clip.mp4", *extra])


def test_lambda_has_its_own_flag_and_top_p_is_a_deprecated_alias(tmp_path, capsys):
    from specvlm.cli import main
    from specvlm.cli.args import decode_config, resolve_lambda
    from specvlm.config import PruneConfig

    def lam(*extra: str) -> float:
        args = _generate_args(*extra)
        resolve_lambda(args)
        return decode_config(args, "specvlm", None).prune.top_p

    assert lam() == PruneConfig().top_p
    assert lam("--lambda", "0.3") == 0.3 and lam("--stage1-mass", "0.2") == 0.2 and lam("--top-p", "0.5") == 0.5
    args = _generate_args("--top-p-sampling", "0.9")          # nucleus sampling is not λ
    assert decode_config(args, "specvlm", None).sampling.top_p_sampling == 0.9
    assert decode_config(args, "specvlm", None).prune.top_p == PruneConfig().top_p
    missing = str(tmp_path / "nope.mp4")                      # settings fail before any video or model is read
    assert main(["generate", "--video", missing, "--top-p", "0.5"]) == 2
    err = capsys.readouterr().err.splitlines()
    notes = [line for line in err if line.startswith("note: --top-p")]
    assert notes == ["note: --top-p is a deprecated spelling of --lambda (Stage I's attention share λ); use "
                     "--lambda, and --top-p-sampling for nucleus sampling"]
    assert main(["generate", "--video", missing, "--lambda", "1.5"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: --lambda=1.5 is out of range")
    assert main(["generate", "--video", missing, "--top-p", "0.5", "--lambda", "0.3"]) == 2
    assert "give only --lambda" in capsys.readouterr().err
    assert main(["generate", "--video", missing, "--threads", "two"]) == 2
    assert "--threads" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["generate", "bench"])
def test_help_names_lambda_and_threads(command, capsys):
    from specvlm.cli import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--lambda λ, --stage1-mass λ" in text and "deprecated spelling of --lambda" in text
    assert "Not nucleus sampling: that is --top-p-sampling" in text and "The pruning share λ is --lambda" in text
    assert "--threads N" in text


@pytest.mark.parametrize("command", ["generate", "bench"])
def test_there_is_no_engine_flag(command, capsys):
    """One decoding engine: no flag chooses another."""
    from specvlm.cli import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "--engine" not in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([command, "--engine", "static", "--video", "x.mp4"])
    assert "unrecognized arguments: --engine" in capsys.readouterr().err
