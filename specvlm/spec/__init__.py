"""The speculative-decoding algorithm, free of model code: pruning, token grids, trees, sampling, acceptance.

* :mod:`~specvlm.spec.pruning`: which video tokens the draft keeps (two-stage, verifier-guided).
* :mod:`~specvlm.spec.grid`: token-grid geometry (a kept set carried between two grids).
* :mod:`~specvlm.spec.adaptive`: r per clip, and which video tokens re-selection adds.
* :mod:`~specvlm.spec.tree`: static tree presets and tree masks.
* :mod:`~specvlm.spec.sampling`: logit processing and the request's generator.
* :mod:`~specvlm.spec.devicetree`, :mod:`~specvlm.spec.devicestatic`, :mod:`~specvlm.spec.devicesampled`
  and :mod:`~specvlm.spec.deviceaccept`: draft trees (dynamic, static, chain; greedy and sampled) and their
  acceptance (greedy, recursive rejection sampling) on the device: fixed shapes, no host reads, traceable
  by ``torch.compile(fullgraph=True)``.

Source: docs/design.md §4.
"""
