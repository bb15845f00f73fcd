"""Command-line scripts of SpecVLM Studio, run from the repository root as ``python -m scripts.NAME``."""
