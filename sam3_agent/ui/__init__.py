"""The Gradio app: settings, pure views of runs and traces, HTML, handlers and the page layout.

Only this package (and ``app.py``) imports Gradio; ``settings``, ``view``, ``html`` and ``runner``
do not, so they can be used and tested without it.
"""
