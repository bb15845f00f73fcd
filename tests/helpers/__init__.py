"""Helpers shared by the test modules (test modules never import each other).

* :mod:`helpers.fakes`: the app tests' fake engine, its prefill, ports and the sample clip.
* :mod:`helpers.engines`: app engines over the fake token stream or a tiny random model; a backend run.
* :mod:`helpers.media`: clips in memory, videos and images on disk, the CLI in a subprocess.
* :mod:`helpers.browser`: Chromium pages over a launched demo.
"""
