"""What the page says about models: names as shown, the custom model field, load errors in one line,
presets that need an unreachable Hub, and the bundled model's caveat on a video it was not trained for.

The Hub answer comes from :func:`specvlm.models.hub.hub_reachable` (asked at most once per process,
through the engine facade, so tests can fake it).

Source: docs/design.md §1 (the app), §9 (deployment); assets/model/README.md (what the bundled model knows).
"""
from __future__ import annotations

import filecmp
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from app.inputs.settings import UserError

def shown_name(model: str) -> str:
    """A model id as shown in the UI: local folders inside the project relative to it, Hub ids as they are."""
    root = Path(__file__).resolve().parents[2]
    try:
        path = Path(model)
        return path.resolve().relative_to(root).as_posix() if path.exists() else model
    except (ValueError, OSError):
        return model


def parse_model_spec(text: str) -> tuple[str, str | None]:
    """Split a custom model field into (target, draft or None).

    Args:
        text: ``"target"``, ``"target + draft"`` or ``"target, draft"``.

    Returns:
        (target, draft); draft None means Self-SD.

    Raises:
        UserError: empty target.
    """
    for sep in ("+", ","):
        if sep in text:
            target, draft = (s.strip() for s in text.split(sep, 1))
            break
    else:
        target, draft = text.strip(), ""
    if not target:
        raise UserError("The custom model field needs a Hub id or local path (optionally 'target + draft').")
    return target, (draft or None)


HUB_UNREACHABLE = ("The Hugging Face Hub is not reachable from this server: only the bundled models and models "
                   "already in the local cache load.")
"""The page's line when the Hub cannot be reached (offline, or ``HF_HUB_OFFLINE`` set)."""


def hub_reachable(engine: Any) -> bool:
    """The engine's answer (True for an engine that cannot tell, e.g. a test fake)."""
    ask = getattr(engine, "hub_reachable", None)
    return True if ask is None else bool(ask())


def is_hub_id(model: str) -> bool:
    """True for a Hub repository id (``namespace/name``), False for paths (``/...``, ``./...``, ``~/...``, a
    folder that exists) and other names."""
    parts = model.split("/")
    return (len(parts) == 2 and all(parts) and not model.startswith((".", "~"))
            and not Path(model).expanduser().exists())


def missing_from_hub(engine: Any, models: Iterable[str | None]) -> list[str]:
    """The Hub ids among ``models`` that cannot load here: not in the local cache, and the Hub unreachable
    (empty when the engine cannot tell)."""
    available = getattr(engine, "model_available", None)
    if available is None:
        return []
    return [m for m in models if m and is_hub_id(m) and not available(m)]


def needs_hub_error(what: str, ids: list[str]) -> str:
    """One line for a Run whose models must come from an unreachable Hub."""
    names = " and ".join(repr(i) for i in ids)
    return (f"{what} needs {names} from the Hugging Face Hub, which this server cannot reach: pick the bundled "
            "preset, or run once with network access so the models are cached.")


def model_error(target: str, draft: str | None, e: BaseException, oom: bool) -> str:
    """One readable sentence for a model that failed to load (a family problem names every supported family)."""
    what = f"model {target!r}" + (f" with draft {draft!r}" if draft else "")
    text = str(e)
    if oom:
        return f"Could not load {what}: out of memory. Pick a smaller model or free the GPU."
    if "trust_remote_code" in text or "custom code" in text:
        return (f"Could not load {what}: it needs custom code from its repository (trust_remote_code), which this "
                f"app never runs. Use a checkpoint of a supported family ({families_text()}) that transformers "
                "supports natively.")
    if type(e).__name__ in ("ModelLoadError", "TokenizerMismatchError"):
        msg = f"Could not load {what}: " + text.removeprefix(f"could not load model {target!r}: ")
        if "has type" in text or "not supported" in text:
            msg = f"{msg.rstrip('.')}. Supported families: {families_text()}."
        return msg
    return f"Could not load {what}: {type(e).__name__}: {text}"


def families_text() -> str:
    """'Qwen2.5-VL, LLaVA-OneVision, Qwen3-VL, SmolVLM2': every family with an adapter (from the registry)."""
    try:
        from specvlm.models.registry import supported_families
        return ", ".join(supported_families())
    except ImportError:
        return "see the README"


SYNTHETIC_CAVEAT = ("**This model only knows synthetic shape videos** (coloured shapes moving on a plain background): "
                    "on another video its description is a shapes-style caption, not a real one. For a real "
                    "description pick a real preset (SmolVLM2 runs on a CPU and downloads from the Hub).")
"""The summary's caveat when the bundled pair describes a video that is not one of its synthetic clips."""
SYNTHETIC_CAVEAT_OFFLINE = SYNTHETIC_CAVEAT.replace(
    "(SmolVLM2 runs on a CPU and downloads from the Hub)",
    "on a server that reaches the Hugging Face Hub (this one cannot, so only the bundled model runs here)")
""":data:`SYNTHETIC_CAVEAT` where the Hub cannot be reached (the real presets would have to download)."""


def synthetic_caveat(target: str, video: str, clips: Path | None = None, hub_ok: bool = True) -> str:
    """:data:`SYNTHETIC_CAVEAT` (:data:`SYNTHETIC_CAVEAT_OFFLINE` without the Hub) when ``target`` is the
    target of a bundled pair and ``video`` is not (a copy of) one of the bundled synthetic clips in
    ``clips`` (default ``assets/videos``), else "".

    Source: docs/design.md §1 (the app); assets/model/README.md (what the bundled model knows).
    """
    try:
        from specvlm.models.presets import BUNDLED_TARGET, LARGE_TARGET, SPARSE_TARGET
        if Path(target).resolve() not in {Path(t).resolve() for t in (BUNDLED_TARGET, SPARSE_TARGET, LARGE_TARGET)}:
            return ""
    except (ImportError, OSError):
        return ""
    if clips is None:
        from specvlm import assets
        clips = assets.path("videos")
    folder = Path(clips)
    try:
        size = Path(video).stat().st_size
        known = [p for p in folder.glob("*.mp4") if p.stat().st_size == size]
        if any(filecmp.cmp(p, video, shallow=False) for p in known):
            return ""
    except OSError:
        return ""
    return SYNTHETIC_CAVEAT if hub_ok else SYNTHETIC_CAVEAT_OFFLINE


SELF_SD_CPU_CAVEAT = ("**Self-SD on a CPU is slower than vanilla on short clips.** The draft is the target itself: "
                      "every draft level reads all of its weights, as a vanilla step does, so a speculative step "
                      "costs several vanilla steps; pruning pays only once the video's cache outweighs the weights "
                      "(thousands of video tokens). On a short clip this run shows τ and where the pruned draft "
                      "fails, not a speedup; Std-SD with a small draft is the pair that wins there.")
"""The summary's caveat for a Self-SD run on a CPU (figures: docs/benchmark.md, *The engine on a CPU*)."""


def run_caveat(target: str, draft: str | None, video: str, device_type: str, hub_ok: bool = True) -> str:
    """The summary's caveats of a Run: :func:`synthetic_caveat` and, for Self-SD (``draft`` None) on a CPU,
    :data:`SELF_SD_CPU_CAVEAT`, joined by a blank line ("" when neither applies).

    Source: docs/design.md §1 (the app) and §11 (byte ceilings).
    """
    parts = [synthetic_caveat(target, video, hub_ok=hub_ok),
             SELF_SD_CPU_CAVEAT if draft is None and device_type == "cpu" else ""]
    return "\n\n".join(p for p in parts if p)
