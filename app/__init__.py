"""SpecVLM Studio's Gradio app: ``backend`` (models, runs), ``ui`` (layout), ``plots`` (figures).

Importing this package loads nothing heavy; ``python app.py`` starts the server.
"""
