"""How a run that ended with an error is reported: one readable sentence, the traceback logged only for
unexpected errors, and the failed step's tensors freed (traceback frames cleared, accelerator cache
emptied).

Source: docs/design.md §8 (nothing crashes the app; out-of-memory errors release the device).
"""
from __future__ import annotations

import logging
import traceback
from typing import Any

from app.inputs.settings import UserError

log = logging.getLogger(__name__)


def handle_failure(engine: Any, e: BaseException, public: bool = False) -> tuple[str, bool]:
    """(one readable sentence, whether to free accelerator memory) for an exception that ended a run.
    Unexpected errors are logged with their traceback; the traceback's frames are then cleared, since
    they pin the failed step's tensors (KV cache, activations). ``public``: the sentence names no
    exception (:func:`failure_message`)."""
    msg = failure_message(e, _is_oom(engine, e), public)
    unexpected = not isinstance(e, ValueError)
    if unexpected:
        log.error("comparison failed: %s", "".join(traceback.format_exception(e)).rstrip())
    drop_frames(e)
    return msg, unexpected


def failure_message(e: BaseException, oom: bool, public: bool = False) -> str:
    """One readable sentence for an error that ended a run (on a public server an unexpected error's
    sentence names neither the exception nor its message: the server log has them)."""
    if isinstance(e, UserError):
        return str(e)
    if isinstance(e, ValueError):  # the engine's typed input errors
        return f"Invalid input: {e}"
    if oom:
        return "Out of memory: try fewer frames, fewer new tokens, a higher drop rate or a smaller model."
    if public:
        return "Decoding failed on the server (its log has the details): try again, or other settings."
    return f"Decoding failed: {type(e).__name__}: {e}"


def _is_oom(engine: Any, e: BaseException) -> bool:
    try:
        return bool(engine.is_oom(e))
    except Exception:
        return isinstance(e, MemoryError)


def free_memory(engine: Any) -> None:
    """Release cached accelerator memory (never fails)."""
    try:
        engine.free_memory()
    except Exception:
        pass


def drop_frames(exc: BaseException | None) -> None:
    """Clear the local variables of every finished frame in an exception's traceback chain so
    the tensors they reference (KV cache, activations) can be freed right away."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if exc.__traceback__ is not None:
            traceback.clear_frames(exc.__traceback__)
            exc.__traceback__ = None
        exc = exc.__cause__ or exc.__context__
