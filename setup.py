"""Packages of the wheel; the project's metadata and dependencies are in pyproject.toml.

The bundled model and example clips stay in the repository's top-level ``assets/`` folder;
the wheel carries them as the package data of ``specvlm._assets`` (one package per folder
below ``assets/``), where :func:`specvlm.assets.path` finds them after a non-editable install.
"""
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
ASSET_PACKAGES = ["specvlm._assets"] + sorted(
    "specvlm._assets." + ".".join(d.relative_to(HERE / "assets").parts)
    for d in (HERE / "assets").rglob("*") if d.is_dir() and d.name != "__pycache__"
)

setup(
    packages=[*find_packages(include=["specvlm", "specvlm.*", "app", "app.*"]), *ASSET_PACKAGES],
    package_dir={"specvlm._assets": "assets"},
    package_data={name: ["*"] for name in ASSET_PACKAGES},
)
