"""The answer image reaches the page inside the message, as a PNG data URL: nothing is written to Gradio's cache.

A plain ``gr.Image`` saves a picture it is handed into Gradio's cache folder before sending it; with that disk full
the save fails inside Gradio, after the handler has returned, and the page ends in a bare error instead of the
status line the handler wrote (it says the run's files could not be saved). ``send_inline`` makes an image output
encode an in-memory picture in memory (``ImageData.url``: "publicly available url or base64 encoded image"); a file
path is still served as ``gr.Image`` serves it. (One component's method is replaced rather than subclassing
``gr.Image``: Gradio writes a ``.pyi`` stub beside every component subclass it imports.)
"""

from __future__ import annotations

import base64
import io
import types
from typing import Any

import gradio as gr
from gradio.data_classes import ImageData
from PIL import Image


def send_inline(component: gr.Image) -> gr.Image:
    """``component``, now sending an in-memory PIL image as a PNG data URL (no disk write); returns it."""
    served = component.postprocess

    def postprocess(self: gr.Image, value: Any) -> Any:
        if not isinstance(value, Image.Image):
            return served(value)
        buffer = io.BytesIO()
        value.save(buffer, format="PNG")
        url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
        return ImageData(url=url, mime_type="image/png", orig_name="final_overlay.png", size=buffer.tell())

    component.postprocess = types.MethodType(postprocess, component)  # type: ignore[method-assign]
    return component
