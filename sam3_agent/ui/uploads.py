"""Upload components whose files reach the handlers in a form the project checks itself.

Gradio's own ``Image`` component opens every upload with Pillow before a handler runs, even with
``type="filepath"``: an iPhone HEIC photo, a decompression bomb or a damaged file then fails inside Gradio with an
opaque error ("upstream Gradio app has raised an exception") and the page waits forever. ``ImagePath`` hands the
handler the uploaded file's path untouched, so every upload goes through ``images.load_image`` and its message
reaches the browser and the API. ``BoundedImageEditor`` checks the size of every layer on its header before Gradio
decodes it, so a small file claiming a huge canvas is refused before it costs memory.
"""

from __future__ import annotations

import io
import warnings
from typing import Any

import gradio as gr
from gradio import processing_utils
from PIL import Image


class ImagePath(gr.Image):
    """``gr.Image`` (same page element) whose upload reaches the handler as the path of the file as uploaded.

    Gradio keeps the uploaded file's own name as the last part of the path (``images.file_name_of`` reads it). An
    image sent inline as a ``data:`` URL (some API clients) is saved to Gradio's cache first, undecoded.
    """

    is_template = True  # Gradio's mechanism for a component that reuses its parent's page element

    def preprocess(self, payload: Any) -> str | None:
        """The uploaded file's path (never decoded here), or ``None`` when nothing was uploaded."""
        if payload is None:
            return None
        if payload.path:
            return payload.path
        if payload.url and payload.url.startswith("data:"):
            return processing_utils.save_base64_to_cache(payload.url, self.GRADIO_CACHE)
        raise gr.Error("the image arrived without a file: upload it again")


class BoundedImageEditor(gr.ImageEditor):
    """``gr.ImageEditor`` (same page element) that refuses a background or layer larger than ``max_side`` pixels a
    side before decoding it (the Correct view shows photos at most ``correct.VIEW_MAX_SIDE`` px a side, so no
    honest brush layer is larger).

    Args:
        max_side: the largest accepted width or height of each image the editor sends, in pixels.
        **kwargs: ``gr.ImageEditor``'s own arguments.
    """

    is_template = True

    def __init__(self, *args: Any, max_side: int, **kwargs: Any) -> None:
        self.max_side = int(max_side)
        super().__init__(*args, **kwargs)

    def get_config(self, cls: Any = None) -> dict[str, Any]:
        # Gradio sends the page the parameters of the constructor it reads: ImageEditor's, not this one's.
        return super().get_config(cls or gr.ImageEditor)

    def convert_and_format_image(self, file: Any, flatten_on_white: bool = False) -> Any:
        if file is not None:
            source = file.path if hasattr(file, "path") else io.BytesIO(file)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                    with Image.open(source) as image:  # reads the header only
                        width, height = image.size
            except (OSError, ValueError, Image.DecompressionBombError):
                raise gr.Error("the painted image could not be read: reload the page and paint again") from None
            if max(width, height) > self.max_side:
                raise gr.Error(f"the painted layer is {width}x{height} pixels, larger than the picture shown "
                               f"(at most {self.max_side} pixels a side): paint on the picture in this page")
        return super().convert_and_format_image(file, flatten_on_white)

