"""The Gradio page: its tabs and wiring (:mod:`~app.page.ui`; all work happens in :class:`app.runs.backend.Backend`),
the Compare tab's components (:mod:`~app.page.layout`), the browser-side hooks and style sheet
(:mod:`~app.page.page_js`), the example rows (:mod:`~app.page.examples`) and the Gradio plumbing: upload folder,
queue, per-request scratch, gallery files (:mod:`~app.page.gradio_io`).
"""
