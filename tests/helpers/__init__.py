"""Helpers shared by the test modules (test modules never import each other).

* :mod:`helpers.fakes`: the app tests' fake engine, its prefill, ports and the sample clip.
* :mod:`helpers.engines`: app engines over the fake token stream or a tiny random model; a backend run.
* :mod:`helpers.media`: clips in memory, videos and images on disk, the CLI in a subprocess.
* :mod:`helpers.browser`: Chromium pages over a launched demo; one Chromium shared by a module's tests.
* :mod:`helpers.cli`: ``python -m specvlm`` run in the test process (exit status, stdout, stderr).
* :mod:`helpers.chisquare`: the two-sample chi-square of the engine-level sampling-law tests (torch only).
* :mod:`helpers.bundled`: the shipped pairs of ``assets/`` loaded on the CPU, their clip, greedy and
  ``model.generate()`` runs (the ``bundled_*`` fixtures in ``tests/conftest.py``).
* :mod:`helpers.served`: ``app.py`` loaded as a module; the page's Run through a server with gradio_client.
"""
