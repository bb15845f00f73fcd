"""What the process runs on, beside the models: CPU threads and counting host reads.

* :mod:`~specvlm.runtime.threads` and :mod:`~specvlm.runtime.cpus`: torch's CPU thread policy (chosen at
  start and, when automatic, again before each request from the load other processes put on this process's
  CPUs).
* :mod:`~specvlm.runtime.hostreads`: :class:`~specvlm.runtime.hostreads.HostReadCounter`, the host reads a
  decode makes (the benchmark and the tests bound them per step).

Nothing here imports the rest of the package.

Source: docs/design.md §10 (shared CPUs) and §4.13 (one host read per step).
"""
