"""scripts/deploy_space.py and the README front matter: in step with the pins and presets, dry run offline."""
from __future__ import annotations

import fnmatch
import socket
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def deploy():
    from scripts import deploy_space
    return deploy_space


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the dry run opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_sdk_version_is_the_gradio_pin(deploy):
    meta, body = deploy.split_readme((ROOT / "README.md").read_text())
    assert str(meta["sdk_version"]) == deploy.gradio_pin(ROOT)
    assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py"
    assert str(meta["python_version"]) == "3.11"
    assert meta["suggested_hardware"] in deploy.HARDWARE
    assert body.lstrip().startswith("# SpecVLM Studio")


def test_front_matter_models_are_the_presets(deploy):
    from specvlm.models.presets import GPU_DEFAULTS, PRESETS

    meta, _ = deploy.split_readme((ROOT / "README.md").read_text())
    models, preload = deploy.preset_models()
    default = PRESETS[GPU_DEFAULTS[0]]
    assert preload == [default.target, default.draft] == meta["preload_from_hub"]
    assert preload == ["Qwen/Qwen3-VL-8B-Instruct", "Qwen/Qwen3-VL-2B-Instruct"]
    assert set(meta["models"]) <= set(models) and preload[0] in meta["models"]
    uploaded = deploy.front_matter(ROOT, "zero-a10g")
    assert uploaded["models"] == models and uploaded["suggested_hardware"] == "zero-a10g"
    assert list(uploaded)[:3] == list(meta)[:3]  # the README's order is kept


def test_hardware_names_exist_in_huggingface_hub(deploy):
    from huggingface_hub import SpaceHardware

    assert set(deploy.HARDWARE) <= {h.value for h in SpaceHardware}


def test_dry_run_lists_every_file_offline(deploy, no_network, capsys):
    assert deploy.main(["--space-id", "someone/specvlm-studio", "--hardware", "t4-small", "--dry-run"]) == 0
    out = capsys.readouterr().out
    files = deploy.space_files(ROOT)
    for f in files:
        assert f"{f.size:,d}  {f.path}" in out
    paths = {f.path for f in files}
    assert {"app.py", "requirements.txt", "README.md", ".gitattributes",
            "assets/model/target/model.safetensors", "specvlm/models/loading.py"} <= paths
    assert not any(p.startswith(("tests/", "scripts/", ".venv/")) or "__pycache__" in p for p in paths)
    target = (ROOT / "assets/model/target/model.safetensors").stat().st_size
    assert f"{target:,d}  assets/model/target/model.safetensors  [large-file storage]" in out
    assert f"{sum(f.size for f in files):,d}  in all" in out
    assert f"sdk_version: {deploy.gradio_pin(ROOT)}" in out and "suggested_hardware: t4-small" in out


def test_gitattributes_send_every_binary_file_to_large_file_storage(deploy):
    rules = [line.split()[0] for line in (ROOT / ".gitattributes").read_text().splitlines()
             if "filter=lfs" in line and not line.startswith("#")]
    for f in deploy.space_files(ROOT):
        if f.size > deploy.LFS_LIMIT or not deploy._is_text(ROOT / f.path):
            assert any(fnmatch.fnmatch(Path(f.path).name, r) for r in rules), f.path


@pytest.mark.parametrize("argv, words", [
    (["--space-id", "no-slash", "--dry-run"], "is not OWNER/NAME"),
    (["--space-id", "a/b", "--hardware", "gpu-please", "--dry-run"], "--hardware 'gpu-please' is unknown"),
])
def test_bad_arguments_are_one_line(deploy, no_network, capsys, argv, words):
    assert deploy.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and err.count("\n") == 1


def test_upload_uses_one_commit_with_the_synced_readme(deploy, monkeypatch):
    import huggingface_hub

    calls = []

    class FakeApi:
        def __init__(self, token=None):
            calls.append(("token", token))

        def create_repo(self, repo_id, **kw):
            calls.append(("create_repo", repo_id, kw["repo_type"], kw["space_sdk"], kw["exist_ok"]))

        def create_commit(self, repo_id, operations, **kw):
            calls.append(("commit", repo_id, [(op.path_in_repo, op.path_or_fileobj) for op in operations]))
            return type("Info", (), {"commit_url": "https://hub/commit/1"})()

        def request_space_hardware(self, repo_id, hardware):
            calls.append(("hardware", repo_id, hardware))

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    files = deploy.space_files(ROOT)
    readme = deploy.space_readme(ROOT, deploy.front_matter(ROOT, "zero-a10g"))
    requirements = deploy.space_requirements(ROOT, "zero-a10g")
    assert deploy.upload("me/space", files, readme, requirements, "zero-a10g", "tok", False) == "https://hub/commit/1"
    assert calls[0] == ("token", "tok") and calls[1] == ("create_repo", "me/space", "space", "gradio", True)
    ops = dict(calls[2][2])
    assert set(ops) == {f.path for f in files} and len(calls[2][2]) == len(files)
    assert ops["README.md"].decode().startswith("---\n") and b"suggested_hardware: zero-a10g" in ops["README.md"]
    assert b"python_version: '3.12'" in ops["README.md"]
    assert ops["requirements.txt"] == requirements.encode() and b"torch==2.11.0" in ops["requirements.txt"]
    assert ops["app.py"] == str(ROOT / "app.py")
    assert calls[3] == ("hardware", "me/space", "zero-a10g")


def _section(out: str, head: str) -> list[str]:
    """The lines of a dry run's section after ``head`` up to the next unindented line ending in ':'."""
    lines = out.splitlines()
    start = lines.index(head) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].endswith(":") and not lines[i].startswith(" ")
                and "==" not in lines[i]), len(lines))
    return lines[start:end]


def test_a_zerogpu_space_names_only_versions_zerogpu_supports(deploy, no_network, capsys):
    """torch 2.11.0 with its torchvision (0.26.0 requires torch==2.11.0), Python 3.12, spaces left to the
    platform; every other pin as the project's."""
    assert deploy.main(["--space-id", "someone/specvlm-studio", "--hardware", "zero-a10g", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "python_version: '3.12'" in _section(out, "Front matter:")
    req = [ln for ln in _section(out, "requirements.txt:") if ln and not ln.startswith("#")]
    pins = dict(ln.split("==") for ln in req)
    assert pins["torch"] == "2.11.0" and pins["torchvision"] == "0.26.0" and "spaces" not in pins
    project = dict(ln.split("==") for ln in (ROOT / "requirements.txt").read_text().splitlines()
                   if "==" in ln and not ln.startswith("#"))
    assert pins == {k: v for k, v in project.items() if k != "spaces"} | deploy.ZEROGPU_PINS
    assert deploy.main(["--print-requirements", "zero-a10g"]) == 0
    assert capsys.readouterr().out == deploy.space_requirements(ROOT, "zero-a10g")


def test_other_hardware_keeps_the_project_pins(deploy, no_network, capsys):
    assert deploy.main(["--space-id", "someone/specvlm-studio", "--hardware", "a10g-small", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "python_version: '3.11'" in _section(out, "Front matter:")
    assert "\n".join(_section(out, "requirements.txt:")) == (ROOT / "requirements.txt").read_text().rstrip()
    assert deploy.space_requirements(ROOT, None) == (ROOT / "requirements.txt").read_text()


def test_the_torch211_environment_is_the_zerogpu_runtime():
    """`make test-torch211` installs what a ZeroGPU Space gets (plus spaces and the test pins)."""
    make = (ROOT / "Makefile").read_text()
    assert "-m scripts.deploy_space --print-requirements zero-a10g" in make
    assert "grep '^spaces==' requirements.txt" in make and "test-torch211:" in make
