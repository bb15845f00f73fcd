"""Reading runs after the fact: metrics (:mod:`~specvlm.analysis.metrics`), run records for
inspection (:mod:`~specvlm.analysis.records`) and on-screen text awareness
(:mod:`~specvlm.analysis.text_aware`)."""
