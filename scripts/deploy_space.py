#!/usr/bin/env python
"""Deploy SpecVLM Studio to a Hugging Face Space in one command.

    python -m scripts.deploy_space --space-id OWNER/NAME [--hardware zero-a10g|t4-small|a10g-large|...]
    python -m scripts.deploy_space --space-id OWNER/NAME --dry-run      # list the upload, no network
    python -m scripts.deploy_space --print-requirements zero-a10g       # the Space's requirements.txt only

Uploads the app (``app.py``, ``app/``, ``specvlm/``, ``assets/``, ``requirements.txt``,
``.gitattributes``, ``README.md``) with ``huggingface_hub``'s commit API, which stores
large and binary files (the bundled ``model.safetensors``, the sample videos) in the
Hub's large-file storage; a plain ``git push`` of them is refused. The files are the
repository's tracked and not-ignored files under those paths (``git ls-files``), or a
walk of them outside a git checkout.

The uploaded README's front matter is the repository's, brought in step with the code:
``sdk_version`` = the pinned ``gradio`` (the Space, not ``requirements.txt``, picks the
Gradio version), ``models`` = every Hub id of the presets, ``preload_from_hub`` = the
GPU default preset's models (downloaded at build time, not on the first Run), and
``suggested_hardware`` = ``--hardware`` when given. With ``--hardware`` the Space is
also asked for that hardware (paid tiers need a payment method; a free account may host up
to 2 ZeroGPU Spaces).

On ZeroGPU (``--hardware zero-a10g``) the Space runs on a runtime ZeroGPU supports: its
``requirements.txt`` pins ``ZEROGPU_PINS`` (torch 2.11.0 and its torchvision) in place of
the project's torch pins and leaves out ``spaces`` (the platform installs its own), and
its front matter says ``python_version: "3.12"``. Other hardware gets the project's
``requirements.txt`` and ``python_version`` unchanged.

The token comes from ``--token``, ``HF_TOKEN`` or ``huggingface-cli login``.

Source: docs/design.md §9 (Spaces: sdk_version, preload_from_hub, large-file storage);
Hugging Face Hub documentation (Spaces configuration reference, ``HfApi.create_commit``;
ZeroGPU: supported PyTorch 2.8.0, 2.9.1, 2.10.0, 2.11.0 and Python 3.10 or 3.12).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: What the Space needs, relative to the repository root (folders include everything under them).
SPACE_PATHS = ("app.py", "app", "specvlm", "assets", "docs", "requirements.txt", ".gitattributes", "README.md")
SKIP = re.compile(r"(^|/)(__pycache__|\.pytest_cache)(/|$)|\.pyc$")
#: Hardware names the Hub accepts (huggingface_hub.SpaceHardware); checked again against the installed library.
HARDWARE = ("cpu-basic", "cpu-upgrade", "zero-a10g", "t4-small", "t4-medium", "l4x1", "l4x4", "l40sx1", "l40sx4",
            "l40sx8", "a10g-small", "a10g-large", "a10g-largex2", "a10g-largex4", "a100-large", "a100x4", "a100x8")
LFS_LIMIT = 10 * 2**20  # files above this (or binary) go to large-file storage
#: ZeroGPU hardware names (a Space on one runs its GPU work through ``spaces.GPU``).
ZEROGPU_HARDWARE = ("zero-a10g",)
#: Pins a ZeroGPU Space gets in place of the project's (torchvision 0.26.0 requires torch==2.11.0).
ZEROGPU_PINS = {"torch": "2.11.0", "torchvision": "0.26.0"}
#: The front matter's python_version on ZeroGPU (it runs Python 3.12.12 or 3.10.13).
ZEROGPU_PYTHON = "3.12"
#: Packages the ZeroGPU platform installs itself; the Space's requirements leave them out.
ZEROGPU_PLATFORM_PACKAGES = ("spaces",)


class DeployError(ValueError):
    """A deployment input is wrong (space id, hardware, missing files); the message says what to do."""


@dataclass(frozen=True)
class SpaceFile:
    """One file of the upload: repository-relative path and size in bytes."""

    path: str
    size: int


def _git_files(root: Path) -> list[str] | None:
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                              "--", *SPACE_PATHS], capture_output=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [p for p in out.decode().split("\0") if p]


def _walk_files(root: Path) -> list[str]:
    paths = []
    for top in SPACE_PATHS:
        p = root / top
        if p.is_file():
            paths.append(top)
        elif p.is_dir():
            paths.extend(str(f.relative_to(root)) for f in p.rglob("*") if f.is_file())
    return paths


def space_files(root: Path = ROOT) -> list[SpaceFile]:
    """Every file the Space gets, sorted, with sizes (bytes).

    Raises:
        DeployError: a file the Space cannot run without is missing.
    """
    names = _git_files(root)
    names = _walk_files(root) if names is None else names
    names = sorted({n for n in names if not SKIP.search(n) and (root / n).is_file()})
    for needed in ("app.py", "requirements.txt", "README.md"):
        if needed not in names:
            raise DeployError(f"{needed} is missing under {root}: run the script from a complete checkout.")
    return [SpaceFile(n, (root / n).stat().st_size) for n in names]


def gradio_pin(root: Path = ROOT) -> str:
    """The ``gradio==X`` version pinned in requirements.txt.

    Raises:
        DeployError: no exact gradio pin.
    """
    m = re.search(r"^gradio==([\w.]+)\s*$", (root / "requirements.txt").read_text(), re.M)
    if not m:
        raise DeployError("requirements.txt has no gradio==X pin: pin gradio so the Space's sdk_version can match.")
    return m.group(1)


def space_requirements(root: Path = ROOT, hardware: str | None = None) -> str:
    """The Space's requirements.txt text: the project's pins, or the ZeroGPU runtime's on ZeroGPU hardware.

    Args:
        root: repository root (its requirements.txt is read).
        hardware: the Space hardware; a name in ``ZEROGPU_HARDWARE`` swaps in ``ZEROGPU_PINS`` and leaves out
            ``ZEROGPU_PLATFORM_PACKAGES``.

    Raises:
        DeployError: requirements.txt lacks one of the pins ``ZEROGPU_PINS`` replaces.
    """
    text = (root / "requirements.txt").read_text()
    if hardware not in ZEROGPU_HARDWARE:
        return text
    lines, swapped = [], set()
    for line in text.splitlines():
        name = re.split(r"[=<>!~\[; ]", line.strip(), maxsplit=1)[0].lower()
        if not name or name.startswith("#") or name in ZEROGPU_PLATFORM_PACKAGES:
            continue
        if name in ZEROGPU_PINS:
            line, _ = f"{name}=={ZEROGPU_PINS[name]}", swapped.add(name)
        lines.append(line)
    missing = sorted(set(ZEROGPU_PINS) - swapped)
    if missing:
        raise DeployError(f"requirements.txt has no pin for {', '.join(missing)}: pin it so ZeroGPU's can replace it.")
    lines.insert(0, f"# ZeroGPU runtime: {', '.join(f'{k} {v}' for k, v in ZEROGPU_PINS.items())}, Python "
                    f"{ZEROGPU_PYTHON}; spaces comes from the platform.")
    return "\n".join(lines) + "\n"


def split_readme(text: str) -> tuple[dict, str]:
    """(front matter as a dict, body) of a README with ``---`` YAML front matter.

    Raises:
        DeployError: no front matter, or it is not a YAML mapping.
    """
    import yaml

    m = re.match(r"^---\n(.*?)\n---\n?(.*)$", text, re.S)
    if not m:
        raise DeployError("README.md has no '---' front matter: a Space needs one (sdk, app_file, ...).")
    meta = yaml.safe_load(m.group(1))
    if not isinstance(meta, dict):
        raise DeployError("README.md's front matter is not a YAML mapping: fix the lines between the '---' markers.")
    return meta, m.group(2)


def preset_models() -> tuple[list[str], list[str]]:
    """(every Hub id the presets use, the GPU default preset's Hub ids), in preset order."""
    from specvlm.models.presets import GPU_DEFAULTS, PRESETS

    def hub_ids(presets) -> list[str]:
        ids = [m for p in presets for m in (p.target, p.draft) if m and not Path(m).is_absolute()]
        return list(dict.fromkeys(ids))

    return hub_ids(PRESETS.values()), hub_ids([PRESETS[GPU_DEFAULTS[0]]])


def front_matter(root: Path = ROOT, hardware: str | None = None) -> dict:
    """The Space front matter: the README's, with sdk_version, models, preload_from_hub (and hardware) in step.

    Args:
        root: repository root.
        hardware: overrides ``suggested_hardware`` when given.

    Returns:
        dict in the README's key order, new keys last.
    """
    meta, _ = split_readme((root / "README.md").read_text())
    models, preload = preset_models()
    meta.update(sdk="gradio", sdk_version=gradio_pin(root), models=models, preload_from_hub=preload)
    meta.setdefault("app_file", "app.py")
    if hardware:
        meta["suggested_hardware"] = hardware
    if hardware in ZEROGPU_HARDWARE:
        meta["python_version"] = ZEROGPU_PYTHON
    return meta


def space_readme(root: Path, meta: dict) -> str:
    """README.md text with ``meta`` as its front matter (the body unchanged)."""
    import yaml

    _, body = split_readme((root / "README.md").read_text())
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n" + body


def check_args(space_id: str, hardware: str | None) -> None:
    """Refuse a malformed space id or an unknown hardware name.

    Raises:
        DeployError: with the accepted form.
    """
    if not space_id:
        raise DeployError("--space-id is missing: e.g. --space-id my-user/specvlm-studio.")
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", space_id):
        raise DeployError(f"--space-id {space_id!r} is not OWNER/NAME: e.g. --space-id my-user/specvlm-studio.")
    if hardware is not None and hardware not in HARDWARE:
        raise DeployError(f"--hardware {hardware!r} is unknown: use one of {', '.join(HARDWARE)}.")


def describe(files: list[SpaceFile], meta: dict, space_id: str, requirements: str) -> str:
    """The dry-run listing: every file with its size and storage, the total, the front matter and requirements."""
    import yaml

    lines = [f"Upload to https://huggingface.co/spaces/{space_id} ({len(files)} files):"]
    for f in files:
        big = f.size > LFS_LIMIT or not _is_text(ROOT / f.path)
        lines.append(f"  {f.size:>12,d}  {f.path}{'  [large-file storage]' if big else ''}")
    lines.append(f"  {sum(f.size for f in files):>12,d}  in all")
    lines.append("Front matter:")
    lines.append("---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True).rstrip() + "\n---")
    lines.append("requirements.txt:")
    lines.append(requirements.rstrip())
    return "\n".join(lines)


def _is_text(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            head = fh.read(8192)
    except OSError:
        return False
    return b"\0" not in head


def upload(space_id: str, files: list[SpaceFile], readme: str, requirements: str, hardware: str | None,
           token: str | None, private: bool) -> str:
    """Create the Space if needed and upload every file in one commit; returns the commit URL."""
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(token=token)
    api.create_repo(space_id, repo_type="space", space_sdk="gradio", exist_ok=True, private=private)
    ops = [CommitOperationAdd(path_in_repo=f.path, path_or_fileobj=str(ROOT / f.path))
           for f in files if f.path not in ("README.md", "requirements.txt")]
    ops.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=readme.encode()))
    ops.append(CommitOperationAdd(path_in_repo="requirements.txt", path_or_fileobj=requirements.encode()))
    info = api.create_commit(space_id, ops, repo_type="space", commit_message="Deploy SpecVLM Studio")
    if hardware:
        api.request_space_hardware(space_id, hardware)
    return str(getattr(info, "commit_url", info))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--space-id", help="OWNER/NAME of the Space (created when missing)")
    p.add_argument("--hardware", help=f"Space hardware to request and suggest: {', '.join(HARDWARE)}")
    p.add_argument("--dry-run", action="store_true",
                   help="list the files, the front matter and the requirements; no network")
    p.add_argument("--print-requirements", metavar="HARDWARE",
                   help="print the requirements.txt a Space on HARDWARE gets, and exit (no --space-id needed)")
    p.add_argument("--private", action="store_true", help="create the Space private")
    p.add_argument("--token", default=None, help="Hub token (default: HF_TOKEN or the saved login)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.print_requirements is not None:
            check_args("owner/name", args.print_requirements)
            print(space_requirements(ROOT, args.print_requirements), end="")
            return 0
        check_args(args.space_id, args.hardware)
        files = space_files(ROOT)
        meta = front_matter(ROOT, args.hardware)
        requirements = space_requirements(ROOT, args.hardware)
    except DeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(describe(files, meta, args.space_id, requirements))
        return 0
    url = upload(args.space_id, files, space_readme(ROOT, meta), requirements, args.hardware,
                 args.token or os.environ.get("HF_TOKEN"), args.private)
    print(f"uploaded {len(files)} files: {url}\nSpace: https://huggingface.co/spaces/{args.space_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
