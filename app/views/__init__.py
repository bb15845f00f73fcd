"""What a Run looks like: the run view folds the worker's messages into the library's run records and builds the
page's updates (:mod:`~app.views.run_view`), the comparison summary in Markdown and JSON
(:mod:`~app.views.summary`), figures and heatmaps (:mod:`~app.views.plots`, their look in either theme
:mod:`~app.views.chart_style`), the Inspect tab and its "why" (:mod:`~app.views.inspect_view`,
:mod:`~app.views.why_view`), what Stage I kept in words (:mod:`~app.views.stage_note`), and the Compare tab's
download (:mod:`~app.views.downloads`). They render records and arrays and load no model; only the Inspect tab
builds Gradio blocks of its own.
"""
