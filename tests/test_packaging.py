"""Packaging: the bundled files are found through specvlm.assets, a wheel carries them, pins fit the ranges,
and the shipped code runs on Python 3.10-3.12 (checked statically with vermin)."""
from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from specvlm import assets

ROOT = Path(__file__).resolve().parents[1]


def test_assets_are_found_in_a_checkout():
    assert assets.root() == ROOT / "assets"
    assert assets.path("videos", "shapes_short.mp4").is_file()
    assert assets.path("model", "target") == ROOT / "assets" / "model" / "target"


def test_an_installed_copy_wins_over_the_checkout(tmp_path, monkeypatch):
    (tmp_path / "videos").mkdir()
    monkeypatch.setattr(assets, "_INSTALLED", tmp_path)
    assert assets.root() == tmp_path
    assert assets.path("videos", "a.mp4") == tmp_path / "videos" / "a.mp4"


@pytest.mark.parametrize("bad", ["..", "/etc/passwd", "model/../../x"])
def test_path_stays_inside_the_assets_folder(bad):
    with pytest.raises(ValueError, match="relative name inside the assets folder"):
        assets.path(bad)


def test_bundled_preset_paths_come_from_assets():
    from specvlm.models.presets import (BUNDLED_DRAFT, BUNDLED_TARGET, LARGE_DRAFT, LARGE_TARGET, SPARSE_DRAFT,
                                        SPARSE_TARGET)

    assert BUNDLED_TARGET == assets.path("model", "target") and BUNDLED_DRAFT == assets.path("model", "draft")
    assert SPARSE_TARGET == assets.path("model_sparse", "target") and SPARSE_DRAFT == assets.path("model_sparse", "draft")
    assert LARGE_TARGET == assets.path("model_large", "target") and LARGE_DRAFT == assets.path("model_large", "draft")


def _pins() -> dict[str, str]:
    pins = {}
    for name in ("requirements.txt", "requirements-dev.txt"):
        for line in (ROOT / name).read_text().splitlines():
            m = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;#]+)", line.strip())
            if m:
                pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def test_every_dependency_is_pinned_within_its_range():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]]
    pins = _pins()
    for req in reqs:
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{req.name} is in pyproject.toml but not pinned in requirements*.txt"
        assert req.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} outside {req.specifier}"


@pytest.mark.filterwarnings("ignore:`project.license`")
def test_the_wheel_carries_every_bundled_file(tmp_path, monkeypatch):
    """setup.py's package data, as build_py would copy it (no build: the file list only)."""
    from setuptools import setup  # noqa: F401  (patches distutils first)
    from distutils.core import run_setup

    monkeypatch.chdir(ROOT)
    dist = run_setup(str(ROOT / "setup.py"), stop_after="config")
    dist.get_command_obj("egg_info").egg_base = str(tmp_path)  # never write into the checkout
    build_py = dist.get_command_obj("build_py")
    build_py.ensure_finalized()
    shipped = {Path(src, f).resolve() for pkg, src, _, files in build_py.data_files
               if pkg.startswith("specvlm._assets") for f in files}
    wanted = {p.resolve() for p in (ROOT / "assets").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert wanted and wanted <= shipped, sorted(str(p) for p in wanted - shipped)[:5]
    assert {"specvlm", "specvlm.video", "specvlm.models", "app", "app.inputs", "app.runs", "app.views",
            "app.page"} <= set(dist.packages)
    assert not {p for p in dist.packages if p.split(".")[0] in ("training", "scripts", "tests")}, dist.packages


VERMIN = [sys.executable, "-c", "import sys, vermin; sys.exit(vermin.main())", "--target=3.10-", "--violations",
          "--no-tips"]
"""Minimum Python 3.10 (ZeroGPU offers Python 3.10.13 and 3.12.12); violations only."""


def test_the_code_needs_nothing_newer_than_python_3_10():
    """vermin finds no syntax, module, function or argument newer than 3.10 in what runs (library, app, scripts,
    training)."""
    r = subprocess.run(VERMIN + ["specvlm", "app", "scripts", "training", "app.py"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "Target versions not met" not in out and "File with incompatible" not in out, out
    assert "Minimum required versions: 3." in r.stdout
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.10"


def test_vermin_flags_code_newer_than_python_3_10(tmp_path):
    (tmp_path / "new.py").write_text("import tomllib\n\ntry:\n    pass\nexcept* ValueError:\n    pass\n")
    r = subprocess.run(VERMIN + [str(tmp_path / "new.py")], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "'tomllib' module requires !2, 3.11" in r.stdout
    assert "Target versions not met" in r.stdout
