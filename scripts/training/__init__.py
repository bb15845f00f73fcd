"""Training of the bundled Qwen2.5-VL target + draft pair (not needed at run time).

Modules, by job: :mod:`~scripts.training.model` (architecture sizes and configs),
:mod:`~scripts.training.data` (synthetic clips, conversations, labels, batches),
:mod:`~scripts.training.losses` (the objectives), :mod:`~scripts.training.loop` (one phase
under a wall-clock budget) and :mod:`~scripts.training.checkpoints` (resumable state, final
models). The command line is ``python -m scripts.train_bundled``.
"""
