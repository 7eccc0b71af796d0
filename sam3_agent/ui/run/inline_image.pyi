"""The answer image reaches the page inside the message, as a PNG data URL: nothing is written to Gradio's cache.

A plain ``gr.Image`` saves a picture it is handed into Gradio's cache folder before sending it; with that disk full
the save fails inside Gradio, after the handler has returned, and the page ends in a bare error instead of the
status line the handler wrote (it says the run's files could not be saved). An in-memory picture handed to
``InlineImage`` is encoded in memory (``ImageData.url``: "publicly available url or base64 encoded image"); a file
path is served as ``gr.Image`` serves it.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import gradio as gr
from gradio.data_classes import ImageData
from PIL import Image

from gradio.events import Dependency

class InlineImage(gr.Image):
    """A ``gr.Image`` output that sends an in-memory PIL image as a PNG data URL (no disk write)."""

    is_template = True  # Gradio's mark for a subclass its page draws with the parent's component (``gr.Image``)

    def postprocess(self, value: Any) -> Any:
        if not isinstance(value, Image.Image):
            return super().postprocess(value)
        buffer = io.BytesIO()
        value.save(buffer, format="PNG")
        url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
        return ImageData(url=url, mime_type="image/png", orig_name="final_overlay.png", size=buffer.tell())
    from typing import Callable, Literal, Sequence, Any, TYPE_CHECKING
    from gradio.blocks import Block
    if TYPE_CHECKING:
        from gradio.components import Timer
        from gradio.components.base import Component