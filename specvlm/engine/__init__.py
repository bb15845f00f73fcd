"""Running the models: one request in order, prepare -> prefill -> loop -> events.

* :mod:`~specvlm.engine.prepare`: a clip and a prompt -> :class:`~specvlm.types.ModelInputs`.
* :mod:`~specvlm.engine.prefill`: the target's two-pass prefill, scoring and pruning, the draft's prefill (over
  :mod:`~specvlm.engine.forward` and :mod:`~specvlm.engine.kv`, the prefill's forward and cache).
* :mod:`~specvlm.engine.loop`: the decode loop over static buffers (:mod:`~specvlm.engine.statickv`): a vanilla
  step, or draft -> verify -> accept -> commit (:mod:`~specvlm.engine.steps`,
  :mod:`~specvlm.engine.sampledsteps`), with re-selection between steps (:mod:`~specvlm.engine.reselection`,
  :mod:`~specvlm.engine.draftcache`); each step captured in a CUDA graph on a GPU (:mod:`~specvlm.engine.graphs`);
  fused forwards on a CPU (:mod:`~specvlm.engine.staticdraft`, :mod:`~specvlm.engine.statictarget`,
  :mod:`~specvlm.engine.weights`).
* :mod:`~specvlm.engine.emit` (tokens to text pieces, EOS, the budget) and :mod:`~specvlm.engine.stream`:
  :func:`~specvlm.engine.stream.stream` (the events) and :func:`~specvlm.engine.stream.generate`.
* :mod:`~specvlm.engine.measures`: the timer, the logit margin and the fold of a stream's events
  (tokens/s, τ, tokens per target forward); :mod:`~specvlm.runtime.hostreads`: counting host reads.
* :mod:`~specvlm.runtime.threads` and :mod:`~specvlm.runtime.cpus`: CPU thread policy.

Source: docs/design.md §2 and §7.
"""
