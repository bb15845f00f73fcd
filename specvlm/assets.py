"""Where the bundled files are: the small model pair (``model/``) and the example clips (``videos/``).

In a source checkout they are the repository's top-level ``assets/`` folder. An installed
wheel carries the same files as package data in ``specvlm/_assets/`` (``setup.py`` maps that
package onto ``assets/``), so a non-editable ``pip install .`` finds them from any working
directory. Every lookup goes through :func:`path`.
"""
from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent
_INSTALLED = _HERE / "_assets"
_CHECKOUT = _HERE.parent / "assets"


def root() -> Path:
    """The folder that holds the bundled files: the installed package data, else the checkout's ``assets/``.

    Returns:
        An absolute path; it may not exist when neither an installed copy nor a checkout is present.

    Source: docs/design.md §3 (layout: ``assets/`` holds the sample videos and the bundled model).
    """
    return _INSTALLED if _INSTALLED.is_dir() else _CHECKOUT


def path(*parts: str) -> Path:
    """A bundled file or folder, e.g. ``path("model", "target")`` or ``path("videos", "shapes_short.mp4")``.

    Args:
        parts: path components below the assets folder (no ``..``).

    Returns:
        The absolute path (existence is not checked: callers say what is missing and how to get it).

    Raises:
        ValueError: a component is absolute or climbs out with ``..``.

    Source: docs/design.md §3.
    """
    for p in parts:
        if Path(p).is_absolute() or ".." in Path(p).parts:
            raise ValueError(f"assets.path: {p!r} must be a relative name inside the assets folder, without '..'.")
    return root().joinpath(*parts)
