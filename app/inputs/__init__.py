"""A Run's inputs, checked before any model work: the server's limits and the panel's run settings as one typed
request (:mod:`~app.inputs.settings`), which models a visitor may load (:mod:`~app.inputs.access`), uploaded files
and their cleanup (:mod:`~app.inputs.uploads`), the player's preview of a video the browser cannot play
(:mod:`~app.inputs.preview`), subtitle cues and a generated clip's ground truth (:mod:`~app.inputs.run_inputs`),
and what the page says about models: names, Hub and load errors (:mod:`~app.inputs.model_messages`).
"""
