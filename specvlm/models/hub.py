"""Is the Hugging Face Hub reachable from here? One short answer per process.

Loading a Hub id on a machine without network makes ``huggingface_hub`` retry for a
long time before it fails. The app and the CLI ask :func:`hub_reachable` once at start
instead: with ``HF_HUB_OFFLINE`` set the answer is False at once; otherwise one HEAD
request with a short timeout decides, and the answer is kept for the life of the process.

Source: ``huggingface_hub`` environment variables (``HF_HUB_OFFLINE``, ``HF_ENDPOINT``);
docs/design.md §9 (deployment).
"""
from __future__ import annotations

import functools
import logging
import os
import urllib.error
import urllib.request

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://huggingface.co"
_TRUE = {"1", "on", "yes", "true"}


def offline_forced() -> bool:
    """True when ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set to a true value (1/on/yes/true)."""
    return any(os.environ.get(v, "").strip().lower() in _TRUE for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_endpoint() -> str:
    """The Hub's base URL: ``HF_ENDPOINT`` when set, else https://huggingface.co (no trailing slash)."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _head(url: str, timeout_s: float) -> bool:
    """One HEAD request, no retries: True for any HTTP answer (even 4xx/5xx means the host answered)."""
    req = urllib.request.Request(url, method="HEAD")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s):  # noqa: S310 - fixed https endpoint
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError) as exc:  # URLError, timeouts, DNS failures, bad endpoint
        log.debug("Hub %s not reachable: %s", url, exc)
        return False


@functools.lru_cache(maxsize=8)
def _probe(endpoint: str, timeout_s: float) -> bool:
    ok = _head(endpoint + "/api/models?limit=1", timeout_s)
    if not ok:
        log.warning("the Hugging Face Hub (%s) is not reachable: only local models and the local cache are used",
                    endpoint)
    return ok


def hub_reachable(timeout_s: float = 2.0) -> bool:
    """Whether the Hugging Face Hub answers, decided quickly and at most once per process.

    Args:
        timeout_s: seconds the single HEAD request may take (connect + answer).

    Returns:
        False at once when ``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE`` is set; otherwise whether one
        HEAD request to ``HF_ENDPOINT`` got any HTTP answer within ``timeout_s``. The result is cached
        per endpoint for the process (a second call makes no request).

    Raises:
        ValueError: ``timeout_s`` is not > 0.

    Source: docs/design.md §9.
    """
    if not timeout_s > 0:
        raise ValueError(f"hub_reachable needs timeout_s > 0, got {timeout_s!r}.")
    if offline_forced():
        return False
    return _probe(hub_endpoint(), float(timeout_s))


def in_local_cache(repo_id: str) -> bool:
    """True when a Hub model's ``config.json`` is in the local Hub cache (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # noqa: BLE001 - a malformed id is simply not cached
        return False


def fetch_config(repo_id: str, timeout_s: float = 10.0) -> bool:
    """Download a Hub model's ``config.json`` alone into the local Hub cache (no weights), so its size can be
    told before anything else is fetched (:func:`specvlm.models.fit.model_size`).

    Args:
        repo_id: a Hub id such as ``Qwen/Qwen2.5-VL-7B-Instruct``.
        timeout_s: seconds the Hub may take to answer.

    Returns:
        True when the config is in the cache; False when it could not be fetched (unknown id, gated, offline).
    """
    try:
        from huggingface_hub import hf_hub_download

        hf_hub_download(repo_id, "config.json", etag_timeout=timeout_s)
        return True
    except Exception as exc:  # noqa: BLE001 - an id whose config cannot be fetched is simply not sized
        log.info("config.json of %s not fetched: %s", repo_id, exc)
        return False


def clear_cache() -> None:
    """Forget the cached answer (tests; a process that changed its network)."""
    _probe.cache_clear()
