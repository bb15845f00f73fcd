"""Static draft trees: named lists of child-rank paths, and their child counts.

A tree has N drafted nodes below an implicit root (the last emitted token, not yet in the target
cache). Nodes are stored parents-first: ``parents[i] < i`` (or -1 for a child of the root). The decode
loop builds and verifies trees on the device (:mod:`specvlm.spec.devicetree`,
:mod:`specvlm.spec.devicestatic`).

Source: EAGLE-2 (Li et al. 2024, dynamic draft trees, Sec. 4); Medusa/EAGLE
static trees; SpecVLM (arXiv 2508.16201) Sec. 3.3; docs/design.md §4.8-4.9.
"""
from __future__ import annotations

# Static trees as lists of paths of child ranks (0 = the draft's top-1 child).
# "official-25": 25 nodes, depth 5 (the EAGLE-style tree shipped with the SpecVLM code).
STATIC_TREES: dict[str, list[tuple[int, ...]]] = {
    "official-25": [
        (0,), (1,), (2,), (3,),
        (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
        (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1), (2, 0, 0),
        (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0),
        (0, 0, 0, 0, 0), (0, 0, 0, 0, 1),
    ],
    "binary-15": [p for d in range(1, 5) for p in
                  [tuple(int(b) for b in format(i, f"0{d}b")) for i in range(2 ** d)]][:15],
}

def static_paths(name: str) -> list[tuple[int, ...]]:
    """The rank paths of a static tree preset (:data:`STATIC_TREES`).

    Raises:
        ValueError: unknown preset.
    """
    if name not in STATIC_TREES:
        raise ValueError(f"static tree {name!r} is unknown: use one of {', '.join(STATIC_TREES)}.")
    return STATIC_TREES[name]


def child_counts(spec: list[tuple[int, ...]]) -> dict[tuple[int, ...], int]:
    """Children per path of a static tree spec; raises ValueError for orphans and rank gaps."""
    have = set(spec)
    kids: dict[tuple[int, ...], int] = {}
    for p in sorted(have, key=lambda q: (len(q), q)):
        if len(p) > 1 and p[:-1] not in have:
            raise ValueError(f"static tree path {p} has no parent {p[:-1]} in the tree.")
        kids[p[:-1]] = kids.get(p[:-1], 0) + 1
    for par, m in kids.items():
        if any(par + (r,) not in have for r in range(m)):
            raise ValueError(f"static tree children of {par} must be ranked 0..{m - 1} without gaps.")
    return kids
