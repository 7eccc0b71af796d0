"""The app's image upload, whose files reach the handlers in a form the project checks itself.

Gradio's own ``Image`` component opens every upload with Pillow before a handler runs, even with
``type="filepath"``: an iPhone HEIC photo, a decompression bomb or a damaged file then fails inside Gradio with an
opaque error ("upstream Gradio app has raised an exception") and the page waits forever. ``image_upload`` makes an
``Image`` that hands the handler the uploaded file's path untouched, so every upload goes through
``images.load_image`` and its message reaches the browser and the API.

It is Gradio's own component with one step replaced on the instance (not a subclass: Gradio writes a ``.pyi`` file
next to any module that defines a component class, and sends the page only its own constructor's settings).
(The Correct tab's brush sends view points, not images: ``ui.correct.actions.brush`` bounds them.)
"""

from __future__ import annotations

import types
from typing import Any

import gradio as gr
from gradio import processing_utils

from ..refusals import refused


def image_upload(**kwargs: Any) -> gr.Image:
    """A ``gr.Image`` (``type="filepath"``) whose upload reaches the handler as the path of the file as uploaded.

    Gradio keeps the uploaded file's own name as the last part of the path (``images.file_name_of`` reads it). An
    image sent inline as a ``data:`` URL (some API clients) is saved to Gradio's cache first, undecoded.

    Args:
        **kwargs: ``gr.Image``'s arguments (``type`` is always ``"filepath"``).
    """
    component = gr.Image(**{**kwargs, "type": "filepath"})
    component.preprocess = types.MethodType(_upload_path, component)  # type: ignore[method-assign]
    return component


def _upload_path(component: gr.Image, payload: Any) -> str | None:
    """The uploaded file's path (never decoded here), or ``None`` when nothing was uploaded."""
    if payload is None:
        return None
    if payload.path:
        return payload.path
    if payload.url and payload.url.startswith("data:"):
        return processing_utils.save_base64_to_cache(payload.url, component.GRADIO_CACHE)
    raise refused("the image arrived without a file: upload it again", "an upload")
