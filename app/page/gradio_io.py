"""Gradio plumbing the page needs: where uploads land, what the queue still refers to, a private scratch
folder per request, and gallery images written as files.

Source: docs/design.md §8 (Gradio traps).
"""
from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import gradio as gr
import numpy as np

log = logging.getLogger(__name__)


def gradio_upload_dir() -> str:
    """The folder Gradio stores uploads in (``GRADIO_TEMP_DIR``, else ``<tmp>/gradio``)."""
    from gradio.utils import get_upload_folder
    return get_upload_folder()


def queued_files(demo: gr.Blocks) -> set[str] | None:
    """Paths of files referenced by requests waiting in the demo's queue (None if unknown).

    Gradio stores uploads by content hash, so two users sending the same file share one path:
    a finished request must not delete a file that a queued one will read.
    """
    q = getattr(demo, "_queue", None)
    if q is None:
        return set()
    try:
        found: set[str] = set()
        for eq in list(q.event_queue_per_concurrency_id.values()):
            for ev in list(eq.queue):
                body = getattr(ev, "data", None)
                _collect_paths(getattr(body, "data", None), found)
        return found
    except Exception:  # a Gradio upgrade changed the internals: keep files (delete_cache cleans up)
        log.warning("could not inspect the Gradio queue", exc_info=True)
        return None


def queued_runs(demo: gr.Blocks, concurrency_id: str) -> int:
    """Runs waiting in the demo's queue ``concurrency_id`` (the GPU queue) for a device (0 when unknown)."""
    try:
        eq = demo._queue.event_queue_per_concurrency_id.get(concurrency_id)
        return len(eq.queue) if eq is not None else 0
    except Exception:  # a Gradio upgrade changed the internals: the count is only informative
        return 0


@contextlib.contextmanager
def request_scratch(root: str | None = None) -> Iterator[Path]:
    """A private temporary folder for one request, removed with everything in it at the end."""
    folder = Path(tempfile.mkdtemp(prefix="specvlm-req-", dir=root))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def gallery_files(items: Sequence[Any] | None, folder: Path) -> list[Any]:
    """Gallery items with numpy images written to PNG files in ``folder``.

    Gradio caches numpy images under a hash of their bytes and rewrites that file on every
    request, so when two users get the same image (same example, same settings) one of them can
    download it half-written. Files are copied into the cache atomically and reused instead.
    """
    from PIL import Image
    out = []
    for item in items or []:
        img, cap = item if isinstance(item, (tuple, list)) else (item, None)
        if isinstance(img, np.ndarray):
            path = folder / f"frame-{uuid.uuid4().hex[:12]}.png"
            Image.fromarray(np.ascontiguousarray(img, dtype=np.uint8)).save(path, format="PNG")
            img = str(path)
        out.append((img, cap))
    return out


def _collect_paths(obj: Any, out: set[str], depth: int = 0) -> None:
    if depth > 6:
        return
    if isinstance(obj, dict):
        if isinstance(obj.get("path"), str):
            out.add(obj["path"])
        for v in obj.values():
            _collect_paths(v, out, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _collect_paths(v, out, depth + 1)
    elif hasattr(obj, "path") and isinstance(getattr(obj, "path"), str):
        out.add(obj.path)



def api_twins(c: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """Hidden API inputs standing in for the page's sliders and choices ``names``: the same label, range and type,
    but no value. Gradio offers an API caller a component's value as the default; these have none, so a caller who
    leaves one out sends None and the chosen preset's value applies (:func:`app.inputs.settings.resolve`).

    Args:
        c: the page's components by name.  names: those to stand in for.

    Returns:
        Name -> its hidden twin (created in the open Blocks context).
    """
    out: dict[str, Any] = {}
    for k in names:
        comp = c[k]
        kw = dict(value=None, visible=False, label=comp.label, elem_id=f"api-{comp.elem_id}")
        if isinstance(comp, gr.Slider):
            out[k] = gr.Number(precision=comp.precision, minimum=comp.minimum, maximum=comp.maximum, **kw)
        else:
            out[k] = gr.Radio(comp.choices, **kw)
    return out
