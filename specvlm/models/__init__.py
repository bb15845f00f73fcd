"""Models: family adapters, the model pair, loading, memory fit, presets.

* :mod:`~specvlm.models.adapter`: the :class:`~specvlm.models.adapter.Adapter` protocol and the
  helpers every family shares; :mod:`~specvlm.models.families`: one adapter per family;
  :mod:`~specvlm.models.registry`: the static ``model_type`` -> adapter table.
* :mod:`~specvlm.models.pair`: :class:`~specvlm.models.pair.ModelPair` and
  :func:`~specvlm.models.pair.pair_from_models`; :mod:`~specvlm.models.loading`:
  :func:`~specvlm.models.loading.load_pair`.
* :mod:`~specvlm.models.fit`: memory estimates and placement; :mod:`~specvlm.models.hub`: Hub
  reachability; :mod:`~specvlm.models.presets`: named pairs with their settings.
* :mod:`~specvlm.models.attention`: the ``specvlm_gqa`` attention a pair's language models run;
  :mod:`~specvlm.models.stopping`: the stop check polled before every layer inside a prefill.
"""
