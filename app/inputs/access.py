"""Which models a visitor may load, decided once by the operator (``app.py`` flags and their environment
variables) and passed to the backend as one :class:`ModelAccess`.

A server on loopback (``127.0.0.1``, the default) serves the person at the keyboard: the custom model field
takes any Hub id or local folder. A public server (on a Hugging Face Space, with ``--share``, or listening
beyond loopback, e.g. ``--host 0.0.0.0``) offers its presets only, unless the operator widens that:
``--allow-custom-models`` (any Hub id), ``--allowed-models`` (these Hub ids) and ``--models-dir`` (folders
inside that directory, named relative to it; no other folder on the server is ever loaded by a visitor).
Every custom model is sized from its config before it loads (a Hub id fetches its ``config.json`` only)
and refused in one line when its weights exceed the device's memory or ``--max-model-gb``.

What a visitor of a public server reads names no server path, exception or library: a model it does not
offer gets one line, the same whether the text is a folder that exists, one that does not, ``../..`` or
5,000 characters; load and decoding failures get one line, and the server log keeps the details.

Source: docs/scaling.md (public deployments); docs/design.md §9 (deployment).
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from app.inputs.model_messages import is_hub_id, missing_from_hub, needs_hub_error, parse_model_spec
from app.inputs.settings import UserError

log = logging.getLogger(__name__)

__all__ = ["ModelAccess", "AccessError", "add_arguments", "access_from_args", "exposure", "resolve_custom",
           "custom_field", "MAX_FIELD_CHARS"]

ENV = {"allow_custom": "SPECVLM_ALLOW_CUSTOM_MODELS", "allowed_models": "SPECVLM_ALLOWED_MODELS",
       "models_dir": "SPECVLM_MODELS_DIR", "max_model_gb": "SPECVLM_MAX_MODEL_GB"}
""":class:`ModelAccess` field -> the environment variable used when its flag is absent."""
MAX_FIELD_CHARS = 512
"""Longest custom model field accepted (characters): two Hub ids are at most 193."""
LOOPBACK_HOSTS = ("localhost", "::1", "ip6-localhost")
"""Host names that listen on loopback only (besides ``127.x.y.z``)."""
GB = 1e9
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_TRUE = {"1", "true", "yes", "on"}


class AccessError(ValueError):
    """An operator's setting of :class:`ModelAccess` is unusable (message names the flag and variable)."""


@dataclasses.dataclass(frozen=True)
class ModelAccess:
    """What the custom model field may load on this server.

    Attributes:
        exposure: why the server is public ("a Hugging Face Space", "a --share link", "--host 0.0.0.0");
            "" for a loopback server, where any Hub id or local folder loads.
        allow_custom: on a public server, any Hub id loads (local folders still only from ``models_dir``).
        allowed_models: Hub ids a public server loads.
        models_dir: absolute folder whose sub-folders a public server loads, named relative to it
            (symbolic links the operator puts there are followed); None: none.
        max_model_gb: largest custom model (target + draft weights at the load dtype, in GB of 1e9 bytes);
            None: only the device's memory bounds it.

    Raises:
        AccessError: ``max_model_gb`` not a positive number, an allowed id that is not a Hub id, or a
            ``models_dir`` that is not an existing absolute folder.

    Source: docs/scaling.md ("A public server").
    """

    exposure: str = ""
    allow_custom: bool = False
    allowed_models: tuple[str, ...] = ()
    models_dir: str | None = None
    max_model_gb: float | None = None

    def __post_init__(self) -> None:
        if self.max_model_gb is not None and not (math.isfinite(self.max_model_gb) and self.max_model_gb > 0):
            raise AccessError(f"--max-model-gb ({ENV['max_model_gb']}) must be a positive number of GB, "
                              f"got {self.max_model_gb!r}.")
        bad = [m for m in self.allowed_models if not _HUB_ID.fullmatch(m) or ".." in m]
        if bad:
            raise AccessError(f"--allowed-models ({ENV['allowed_models']}) takes Hub ids such as "
                              f"Qwen/Qwen2.5-VL-7B-Instruct, comma-separated; {bad[0]!r} is not one.")
        if self.models_dir is not None and not (Path(self.models_dir).is_absolute()
                                                and Path(self.models_dir).is_dir()):
            raise AccessError(f"--models-dir ({ENV['models_dir']}) must name an existing folder; "
                              f"{self.models_dir!r} is not one.")

    @property
    def public(self) -> bool:
        """True when people other than the operator reach the page."""
        return bool(self.exposure)

    @property
    def offers_custom(self) -> bool:
        """True when the custom model field can load anything on this server."""
        return not self.public or self.allow_custom or bool(self.allowed_models) or self.models_dir is not None

    def refusal(self) -> str:
        """The one line a public server answers for any custom model it does not offer."""
        ways = ["a preset"]
        if self.allow_custom:
            ways.append("a Hub id")
        elif self.allowed_models:
            ways.append("a Hub id among " + ", ".join(self.allowed_models))
        if self.models_dir is not None:
            ways.append("the name of a folder in its models directory")
        how = "; ".join(ways[:-1]) + "; or " + ways[-1] if len(ways) > 1 else ways[0]
        return f"The custom model field names no model this server offers: pick {how}."

    def describe(self) -> str:
        """One line for the server log: what visitors may load."""
        if not self.public:
            return "custom models: any Hub id or local folder (loopback server)"
        parts = ["any Hub id" if self.allow_custom else "", ", ".join(self.allowed_models),
                 f"folders in {self.models_dir}" if self.models_dir else ""]
        what = "; ".join(p for p in parts if p) or "none (presets only)"
        limit = f"; at most {self.max_model_gb:g} GB of weights" if self.max_model_gb else ""
        return f"public server ({self.exposure}): custom models: {what}{limit}"

    def load_failed(self, message: str, oom: bool) -> str:
        """What a visitor reads when a model failed to load: ``message`` on loopback, one plain line on a
        public server (the server log keeps ``message``)."""
        if not self.public:
            return message
        if oom:
            return "Could not load the model: out of memory. Pick a smaller model or a preset."
        return "Could not load the model (the server log has the details): pick a preset or another model."


def exposure(host: str, share: bool, environ: Mapping[str, str]) -> str:
    """Why a server started with ``host`` and ``share`` is public ("" when it is not).

    A Hugging Face Space sets ``SPACE_ID`` (and ``SYSTEM=spaces``); a host other than loopback
    (``127.x.y.z``, ``localhost``, ``::1``) listens beyond this machine.

    Source: Gradio's ``utils.get_space`` (``SPACE_ID``); docs/scaling.md ("A public server").
    """
    if environ.get("SPACE_ID") or environ.get("SYSTEM", "").lower() == "spaces":
        return "a Hugging Face Space"
    if share:
        return "a --share link"
    h = (host or "").strip().strip("[]").lower()
    if h in LOOPBACK_HOSTS or re.fullmatch(r"127(\.\d{1,3}){3}", h):
        return ""
    return f"--host {host or '(all interfaces)'}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of :class:`ModelAccess` (each with its environment variable)."""
    g = parser.add_argument_group("models visitors may load (on a public server: Space, --share, or a host "
                                  "beyond loopback; a loopback server loads any)")
    g.add_argument("--allow-custom-models", action="store_true", default=None,
                   help=f"let visitors load any Hub id (env {ENV['allow_custom']}=1)")
    g.add_argument("--allowed-models", default=None, metavar="ID,ID",
                   help=f"Hub ids visitors may load, comma-separated (env {ENV['allowed_models']})")
    g.add_argument("--models-dir", default=None, metavar="DIR",
                   help=f"folder whose sub-folders visitors may load by name (env {ENV['models_dir']})")
    g.add_argument("--max-model-gb", type=float, default=None,
                   help=f"largest custom model, GB of weights (env {ENV['max_model_gb']}; default: what the "
                        "device holds)")


def access_from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> ModelAccess:
    """The :class:`ModelAccess` of ``app.py``'s flags (``host``, ``share`` and those of :func:`add_arguments`),
    each absent flag taken from its environment variable.

    Raises:
        AccessError: an unusable setting (message names the flag and its variable).
    """
    def env(key: str) -> str:
        return environ.get(ENV[key], "").strip()

    allow = args.allow_custom_models if args.allow_custom_models is not None else env("allow_custom").lower() in _TRUE
    ids = args.allowed_models if args.allowed_models is not None else env("allowed_models")
    folder = args.models_dir if args.models_dir is not None else env("models_dir")
    limit = args.max_model_gb
    if limit is None and env("max_model_gb"):
        try:
            limit = float(env("max_model_gb"))
        except ValueError:
            raise AccessError(f"{ENV['max_model_gb']}={env('max_model_gb')!r} is not a number of GB.") from None
    return ModelAccess(exposure(args.host, args.share, environ), bool(allow),
                       tuple(i.strip() for i in ids.split(",") if i.strip()),
                       str(Path(folder).expanduser().absolute()) if folder else None, limit)


def custom_field(access: ModelAccess | None) -> dict[str, Any]:
    """The page's custom model textbox (label, placeholder, whether it takes input, longest text)."""
    access = access or ModelAccess()
    if access.offers_custom and not access.public:
        label, hint = ("Custom model (Hub id or local path; 'target + draft' for Std-SD)",
                       "overrides the preset when filled")
    elif access.offers_custom:
        label, hint = "Custom model ('target + draft' for Std-SD)", access.refusal().split(": pick ", 1)[1]
    else:
        label, hint = "Custom model", "this server offers its presets only"
    return dict(label=label, placeholder=hint, interactive=access.offers_custom, max_length=MAX_FIELD_CHARS)


def resolve_custom(field: Any, access: ModelAccess, engine: Any, device: str | None = None,
                   dtype: str | None = None) -> tuple[str, str | None, str] | None:
    """(target, draft, display name) of a filled custom model field, checked against ``access`` and sized
    before anything loads; None when the field is blank (the preset runs).

    Args:
        field: the field as sent (``"target"``, ``"target + draft"`` or ``"target, draft"``).
        access: the server's :class:`ModelAccess`.
        engine: the backend's engine (``model_available``, ``model_size``, ``cuda_available`` where it has them).
        device, dtype: the backend's (None: CUDA when available, else the CPU; the engine's dtype there).

    Returns:
        Models to load (a models-directory folder as its absolute path) and the name the page shows.

    Raises:
        UserError: a field that is not text, too long or holds control characters; a model a public server
            does not offer (:meth:`ModelAccess.refusal`); Hub models the server cannot reach; a model too
            large for the device or ``access.max_model_gb``.

    Source: docs/scaling.md ("A public server").
    """
    if field is None or (isinstance(field, str) and not field.strip()):
        return None
    text = _check_field(field, access)
    target, draft = parse_model_spec(text)
    models = tuple(_vet(m, access) for m in (target, draft) if m)
    missing = missing_from_hub(engine, models)
    if missing:
        raise UserError(needs_hub_error("This custom model", missing))
    check_size(engine, models, text, access, device, dtype)
    return models[0], (models[1] if len(models) > 1 else None), text


def _check_field(field: Any, access: ModelAccess) -> str:
    """The stripped field, or a one-line refusal naming it (on a public server always :meth:`ModelAccess.refusal`)."""
    problem = ""
    if not isinstance(field, str):
        problem = "must be text: a Hub id or a local folder (optionally 'target + draft')"
    elif len(field) > MAX_FIELD_CHARS or any(len(p) > 255 for p in re.split(r"[/+,]", field)):
        problem = (f"is too long ({len(field):,} characters): give a Hub id or a local folder of at most "
                   f"{MAX_FIELD_CHARS} characters, no name in it over 255")
    elif any(ord(c) < 32 or ord(c) == 127 for c in field):
        problem = "holds control characters: give a Hub id or a local folder"
    if problem:
        raise UserError(access.refusal() if access.public else f"The custom model field {problem}.")
    return field.strip()


def _vet(model: str, access: ModelAccess) -> str:
    """The model to load for one name of the field: itself on loopback; on a public server a folder of
    ``models_dir`` (absolute) or an offered Hub id.

    Raises:
        UserError: :meth:`ModelAccess.refusal` for anything else.
    """
    if not access.public:
        return model
    rel = PurePosixPath(model)
    if (access.models_dir is not None and not rel.is_absolute() and ".." not in rel.parts
            and not model.startswith("~") and "\\" not in model):
        folder = Path(access.models_dir, *rel.parts)
        if folder.is_dir():
            return str(folder)
    offered = access.allow_custom or model in access.allowed_models
    if offered and _HUB_ID.fullmatch(model) and ".." not in model and is_hub_id(model):
        return model
    raise UserError(access.refusal())


def check_size(engine: Any, models: tuple[str, ...], name: str, access: ModelAccess, device: str | None,
               dtype: str | None) -> None:
    """Refuse a custom model whose weights at the load dtype (plus :mod:`specvlm.models.fit`'s loading
    margin) exceed the device's memory, or whose weights exceed ``access.max_model_gb``. Sizes come from
    ``engine.model_size`` (the config alone; an engine without it is not checked); a size that cannot be
    told is refused on a public server and left to the loader on loopback.

    Raises:
        UserError: one line naming the model, the estimate and the bound.

    Source: :mod:`specvlm.models.fit` (sizes from the config on the ``meta`` device, the loading margin).
    """
    size_of = getattr(engine, "model_size", None)
    if size_of is None:
        return
    sizes = [_size(size_of, m) for m in dict.fromkeys(models)]
    if any(s is None for s in sizes):
        if access.public:
            raise UserError(f"The custom model {name!r} cannot be sized from its config, so this server does not "
                            "load it: pick a preset or another model.")
        return
    from specvlm.dtypes import dtype_name
    from specvlm.models.fit import OVERHEAD_BYTES, OVERHEAD_SHARE
    from specvlm.models.loading import default_device, load_dtype

    dev = device or default_device()
    loads_in = load_dtype(dtype, dev)                       # the loader's choice (fp16 on GPUs without bf16)
    nbytes, kind = loads_in.itemsize, dtype_name(loads_in)
    weights = sum(s.weight_bytes(nbytes) for s in sizes)
    if access.max_model_gb is not None and weights > access.max_model_gb * GB:
        raise UserError(f"The custom model {name!r} has ~{weights / GB:.3g} GB of weights in {kind}, over this "
                        f"server's limit of {access.max_model_gb:g} GB: pick a smaller model or a preset.")
    need, held = weights * (1 + OVERHEAD_SHARE) + OVERHEAD_BYTES, device_memory(dev)
    if held is not None and need > held:
        raise UserError(f"The custom model {name!r} needs ~{need / GB:.3g} GB ({weights / GB:.3g} GB of weights in "
                        f"{kind} and a loading margin) but this server's {'GPU' if dev.startswith('cuda') else 'CPU'}"
                        f" memory is {held / GB:.3g} GB: pick a smaller model or a preset.")


def device_memory(device: str) -> float | None:
    """Bytes of memory of a device: a CUDA device's total (``cuda`` alone: all visible GPUs together), the
    machine's RAM for ``cpu``; None when it cannot be told."""
    if device.startswith("cuda"):
        from specvlm.models.fit import detect_gpus

        index = int(device.split(":")[1]) if ":" in device else None
        total = sum(g.total_bytes for g in detect_gpus() if index is None or g.index == index)
        return float(total) or None
    if device.startswith("cpu"):
        try:
            return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError, AttributeError):
            return None
    return None


def _size(size_of: Any, model: str) -> Any:
    """``size_of(model)``, None when it fails (logged)."""
    try:
        return size_of(model)
    except Exception:  # noqa: BLE001 - an unknown size is handled as one
        log.warning("could not size %s", model, exc_info=True)
        return None


def _cuda(engine: Any) -> bool:
    try:
        return bool(engine.cuda_available())
    except Exception:
        return False
