"""Running the models: forwards, KV caches, prefill, draft runners and the decoding loops.

* :mod:`~specvlm.engine.prepare`: a clip and a prompt -> :class:`~specvlm.types.ModelInputs`.
* :mod:`~specvlm.engine.stream`: :func:`~specvlm.engine.stream.stream` and
  :func:`~specvlm.engine.stream.generate`, the vanilla and speculative loops.
* :mod:`~specvlm.engine.forward`: one language-model forward, embeddings.
* :mod:`~specvlm.engine.prefill`: target and draft prefill.
* :mod:`~specvlm.engine.draft` and :mod:`~specvlm.engine.fastdraft`: the draft's cache owner
  (transformers' modules, or fused ops over a static buffer).
* :mod:`~specvlm.engine.kv`: KV caches (the attention the language models run is
  :mod:`~specvlm.models.attention`, set when a pair is built).
* :mod:`~specvlm.engine.measures`: the timer, the logit margin and the fold of a stream's events
  (tokens/s, τ, tokens per target forward).
* :mod:`~specvlm.engine.threads` and :mod:`~specvlm.engine.cpus`: CPU thread policy.

Source: docs/design.md §2 and §7.
"""
