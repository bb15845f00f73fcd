"""SpecVLM Studio's Gradio app, in four parts:

* :mod:`app.inputs`: what a request may ask and brings (server limits, run settings, access to custom models,
  uploaded videos, subtitles and ground truth, the player's preview, what the page says about models);
* :mod:`app.runs`: how a Run happens (the backend that checks and orders it, the devices and each session's
  active Run, the typed facade over the library, the worker that prepares once and streams each method, its
  progress, timing, failures, and the ZeroGPU adapter);
* :mod:`app.views`: what a Run looks like (the run view and summary built from the library's run records, the
  charts and heatmaps, the Inspect tab, the download);
* :mod:`app.page`: the Gradio page (tabs and wiring, the components, its browser hooks, examples, Gradio plumbing).

Importing this package loads nothing heavy; ``python app.py`` starts the server.
"""
