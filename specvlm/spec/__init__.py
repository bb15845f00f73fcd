"""The speculative-decoding algorithm, free of model code: pruning, token grids, trees, sampling, drafting.

* :mod:`~specvlm.spec.pruning`: which video tokens the draft keeps (two-stage, verifier-guided).
* :mod:`~specvlm.spec.grid`: token-grid geometry (a kept set carried between two grids).
* :mod:`~specvlm.spec.tree`: draft trees and their attention masks.
* :mod:`~specvlm.spec.sampling`: logit processing, draws and recursive rejection sampling.
* :mod:`~specvlm.spec.drafting` and :mod:`~specvlm.spec.drafters`: building a draft tree and
  accepting it (greedy and sampled).
* :mod:`~specvlm.spec.devicetree`, :mod:`~specvlm.spec.devicestatic`, :mod:`~specvlm.spec.devicesampled`
  and :mod:`~specvlm.spec.deviceaccept`: the same trees and acceptance on the device (fixed shapes, no host
  reads, traceable by ``torch.compile(fullgraph=True)``) for a static, capturable decode engine.

Source: docs/design.md §4.
"""
