"""Reading runs: the run record and the comparison of two runs (:mod:`~specvlm.analysis.run`), metrics
(:mod:`~specvlm.analysis.metrics`), inspection of run files (:mod:`~specvlm.analysis.records`) and on-screen
text awareness (:mod:`~specvlm.analysis.text_aware`)."""
