"""The app's image upload reaches the handler undecoded (Pillow never sees it inside Gradio)."""

from __future__ import annotations

import os

import gradio as gr
from gradio.data_classes import ImageData

from sam3_agent.ui.run import uploads
from sam3_agent.ui.run.uploads import image_upload

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
