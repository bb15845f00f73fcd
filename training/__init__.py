"""How the bundled model pairs are made: training and evaluation of the Qwen2.5-VL target + draft pairs in
``assets/model/`` and ``assets/model_sparse/`` (run from a checkout; not part of the installed package).

Modules, by job: :mod:`~training.model` (architecture sizes and configs),
:mod:`~training.data` (synthetic clips, conversations, answer labels, batches), :mod:`~training.token_labels`
(per-token probe labels), :mod:`~training.losses` (the objectives), :mod:`~training.loop` (one phase
under a wall-clock budget), :mod:`~training.checkpoints` (resumable state, final
models), :mod:`~training.prompt_format` (the prompt layout the weights were trained with); the evaluations'
:mod:`~training.eval_clips` (held-out clips, scoring), :mod:`~training.eval_runs` (shared prefill, workers,
resumable records) and :mod:`~training.eval_bundled_report` (the bundled evaluation's summary). The command lines:
``python -m training.train_bundled``, ``training.eval_bundled``, ``training.eval_sparse``,
``training.build_bundled_processor``. See training/README.md.
"""
