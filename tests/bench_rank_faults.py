"""``python -m specvlm`` with injected faults, run by torchrun in tests/test_bench_distributed.py.

``SPECVLM_TEST_RAISE_ON``: the input (by name) whose measurement raises a RuntimeError (the rank records the
failure and goes on). ``SPECVLM_TEST_DIE_ON``: the input at which the rank process exits at once with status 3,
as a rank killed by the system would (nothing is flushed, no Python cleanup), once the file
``SPECVLM_TEST_DIE_AFTER`` has a line (another rank's records: it has finished an input by then).
"""
import os
import sys
import time
from pathlib import Path

from specvlm.bench import distributed
from specvlm.cli import main

_measure = distributed.bench_input


def _faulty(pair, inp, settings, progress=None):
    if inp.name == os.environ.get("SPECVLM_TEST_DIE_ON"):
        other = Path(os.environ.get("SPECVLM_TEST_DIE_AFTER", ""))
        end = time.monotonic() + 120
        while not (other.is_file() and other.read_text().strip()) and time.monotonic() < end:
            time.sleep(0.05)
        os._exit(3)
    if inp.name == os.environ.get("SPECVLM_TEST_RAISE_ON"):
        raise RuntimeError(f"injected failure on {inp.name}")
    return _measure(pair, inp, settings, progress)


distributed.bench_input = _faulty

if __name__ == "__main__":
    sys.exit(main())
