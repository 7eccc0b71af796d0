"""The app's upload components: an image upload reaches the handler undecoded; an oversized brush layer is refused
on its header, before Gradio decodes it."""

from __future__ import annotations

import io
import os

import gradio as gr
import pytest
from gradio.data_classes import FileData, ImageData
from PIL import Image, ImageFile

from sam3_agent.ui import uploads
from sam3_agent.ui.uploads import bounded_image_editor, image_upload

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


def test_an_upload_reaches_the_handler_as_its_path_even_when_pillow_cannot_read_it(tmp_path):
    path = tmp_path / "IMG_0001.HEIC"
    path.write_bytes(b"\x00\x00\x00\x18ftypheic not really")  # damaged: Gradio's own Image would fail here
    with gr.Blocks():
        component = image_upload(elem_id="the-image")
    assert component.preprocess(ImageData(path=str(path), orig_name=path.name)) == str(path)
    assert component.preprocess(None) is None
    assert component.get_config()["elem_id"] == "the-image" and component.type == "filepath"


def test_the_upload_components_leave_no_file_beside_their_module():
    assert not (os.path.exists(uploads.__file__.removesuffix(".py") + ".pyi"))  # Gradio's stubs of new classes


def blank_png(width: int, height: int, path) -> str:
    Image.new("1", (width, height)).save(path, format="PNG", optimize=True)
    return str(path)


def test_a_brush_layer_larger_than_the_view_is_refused_on_its_header(tmp_path, monkeypatch):
    with gr.Blocks():
        editor = bounded_image_editor(1024, type="numpy", elem_id="the-editor")
    assert editor.get_config()["elem_id"] == "the-editor"  # the page gets every ImageEditor setting
    big = FileData(path=blank_png(9000, 9000, tmp_path / "layer.png"), orig_name="layer.png")
    assert os.path.getsize(big.path) < 100_000  # 9000x9000 RGBA would be 324 MB once decoded
    decoded = []
    original = ImageFile.ImageFile.load
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda image: decoded.append(image.size) or original(image))
    with pytest.raises(gr.Error, match="the painted layer is 9000x9000 pixels, larger than the picture shown"):
        editor.convert_and_format_image(big)
    assert decoded == []
    small = FileData(path=blank_png(600, 400, tmp_path / "ok.png"), orig_name="ok.png")
    assert editor.convert_and_format_image(small).shape[:2] == (400, 600)


def test_a_layer_sent_as_bytes_is_checked_too():
    with gr.Blocks():
        editor = bounded_image_editor(100, type="numpy")
    buffer = io.BytesIO()
    Image.new("RGBA", (200, 50)).save(buffer, format="PNG")
    with pytest.raises(gr.Error, match="200x50 pixels"):
        editor.convert_and_format_image(buffer.getvalue())
