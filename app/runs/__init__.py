"""How a Run happens: the backend checks a request and orders the Run (:mod:`~app.runs.backend`) on a free device
(:mod:`~app.runs.devices`), one active Run per browser session (:mod:`~app.runs.sessions`); the worker
(:mod:`~app.runs.worker`) reads the video, prepares the model inputs once and streams each method through the typed
facade over the library (:mod:`~app.runs.facade`), with blocking work in a thread a Stop reaches
(:mod:`~app.runs.pump`), per-layer progress (:mod:`~app.runs.progress`), repeated timing and the machine's load
(:mod:`~app.runs.timing`), errors in one sentence (:mod:`~app.runs.failures`), and the ZeroGPU adapter
(:mod:`~app.runs.zerogpu`).
"""
