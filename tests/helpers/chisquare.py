"""Two-sample chi-square homogeneity test of sampled outcomes (the engine-level sampling-law tests).

Torch only (no scipy): the p-value is the chi-square survival function, ``Q(dof / 2, stat / 2)`` =
``torch.special.gammaincc``.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch


@dataclass
class ChiSquare:
    """The test's outcome: p-value, statistic, degrees of freedom and the 2 x cells table it was computed on."""

    p: float
    stat: float
    dof: int
    table: list[list[float]]


def two_sample_chi_square(a: Counter, b: Counter, min_cell: int = 10) -> ChiSquare:
    """Are the outcomes counted in ``a`` and ``b`` drawn from one law?

    Outcomes with fewer than ``min_cell`` draws in both samples together are pooled into one cell (so that the
    chi-square approximation holds); an empty pooled cell is dropped.

    Args:
        a, b: counts per outcome (any hashable, sortable outcome), from independent draws.
        min_cell: the fewest draws (a and b together) an outcome needs to keep its own cell.

    Returns:
        ChiSquare: p-value (small = the laws differ), statistic, dof (cells - 1) and the table.
    """
    keys = sorted(set(a) | set(b))
    big = [k for k in keys if a[k] + b[k] >= min_cell]
    table = torch.tensor([[c[k] for k in big] + [sum(c[k] for k in keys if k not in big)] for c in (a, b)],
                         dtype=torch.float64)
    table = table[:, table.sum(0) > 0]
    expected = table.sum(1, keepdim=True) * table.sum(0, keepdim=True) / table.sum()
    stat = float(((table - expected) ** 2 / expected).sum())
    dof = table.shape[1] - 1
    p = float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                      torch.tensor(stat / 2, dtype=torch.float64))) if dof else 1.0
    return ChiSquare(p, stat, dof, table.tolist())
