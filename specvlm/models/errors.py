"""Errors of loading a model pair (each a ValueError whose message names the model and what to do)."""
from __future__ import annotations


class ModelLoadError(ValueError):
    """A model or processor could not be loaded; the message names it and says what to do."""


class TokenizerMismatchError(ModelLoadError):
    """Std-SD draft and target tokenizers really differ (not just padded vocab sizes)."""
