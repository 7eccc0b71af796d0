"""Upload components whose files reach the handlers in a form the project checks itself.

Gradio's own ``Image`` component opens every upload with Pillow before a handler runs, even with
``type="filepath"``: an iPhone HEIC photo, a decompression bomb or a damaged file then fails inside Gradio with an
opaque error ("upstream Gradio app has raised an exception") and the page waits forever. ``image_upload`` makes an
``Image`` that hands the handler the uploaded file's path untouched, so every upload goes through
``images.load_image`` and its message reaches the browser and the API. ``bounded_image_editor`` makes an
``ImageEditor`` that checks the size of every layer on its header before Gradio decodes it, so a small file claiming
a huge canvas is refused before it costs memory.

Both are Gradio's own components with one step replaced on the instance (not subclasses: Gradio writes a ``.pyi``
file next to any module that defines a component class, and sends the page only its own constructor's settings).
"""

from __future__ import annotations

import functools
import io
import types
import warnings
from typing import Any

import gradio as gr
from gradio import processing_utils
from PIL import Image


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
    raise gr.Error("the image arrived without a file: upload it again")


def bounded_image_editor(max_side: int, **kwargs: Any) -> gr.ImageEditor:
    """A ``gr.ImageEditor`` that refuses a background or layer larger than ``max_side`` pixels a side before decoding
    it (the Correct view shows photos at most ``correct.VIEW_MAX_SIDE`` px a side, so no honest layer is larger).

    Args:
        max_side: the largest accepted width or height of each image the editor sends, in pixels.
        **kwargs: ``gr.ImageEditor``'s arguments.
    """
    editor = gr.ImageEditor(**kwargs)
    convert = functools.partial(_bounded_convert, editor.convert_and_format_image, int(max_side))
    editor.convert_and_format_image = convert  # type: ignore[method-assign]
    return editor


def _bounded_convert(convert: Any, max_side: int, file: Any, flatten_on_white: bool = False) -> Any:
    """Check the header's size of one image the editor sent, then let Gradio decode it (``convert``)."""
    if file is not None:
        source = file.path if hasattr(file, "path") else io.BytesIO(file)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                with Image.open(source) as image:  # reads the header only
                    width, height = image.size
        except (OSError, ValueError, Image.DecompressionBombError):
            raise gr.Error("the painted image could not be read: reload the page and paint again") from None
        if max(width, height) > max_side:
            raise gr.Error(f"the painted layer is {width}x{height} pixels, larger than the picture shown "
                           f"(at most {max_side} pixels a side): paint on the picture in this page")
    return convert(file, flatten_on_white)
