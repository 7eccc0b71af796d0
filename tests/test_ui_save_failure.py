"""The app when a run's files cannot be written (disk full): the answer is shown and the status says the files are
missing, never "Running..." for good; the API says so in words."""

from __future__ import annotations

import errno

import gradio as gr
import pytest
from conftest import ASSETS, KnownSegmenter, tool

from sam3_agent.presets import Backends
from sam3_agent.ui.run import api as api_module
from sam3_agent.ui.run import handlers as handlers_module
from sam3_agent.ui.run.handlers import Handlers
from sam3_agent.ui.run.runner import AgentFactory
from sam3_agent.ui.run.slot import RunSlot
from sam3_agent.ui.settings import AppSettings
from sam3_agent.vlm.scripted import ScriptedVLM

SCRIPT = {"main": [tool("segment_phrase", text_prompt="cup"), tool("select_masks_and_return", final_answer_masks=[1])],
          "verify": []}


@pytest.fixture
def disk_full_handlers(tmp_path, monkeypatch):
    def disk_full(trace, folder):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(handlers_module, "write_answer", disk_full)  # a run's answer files (the Run tab)
    monkeypatch.setattr(api_module, "write_run_files", disk_full)  # the API's files
    idle = ScriptedVLM([])
    factory = AgentFactory(AppSettings(max_rounds=5), Backends(idle, idle, KnownSegmenter(
        {"cup": [((100, 100, 300, 250), 0.9)]}), {}), SCRIPT)
    warnings: list[str] = []
    return Handlers(factory, warn=warnings.append, root=tmp_path / "app"), warnings


def test_a_run_whose_files_cannot_be_saved_ends_with_a_clear_status_and_its_answer(disk_full_handlers):
    handlers, warnings = disk_full_handlers
    last = list(handlers.run(str(ASSETS / "coffee.jpg"), "the cup", 5, 0.5, RunSlot()))[-1]
    assert 'class="status status-error"' in last.status and "Running" not in last.status
    assert "Done: 1 mask selected after 2 rounds. Its files could not be saved on the server (No space left on " \
           "device), so there is nothing to download" in last.status
    assert last.final_image is not None and 'data-mask="1"' in last.final_masks and last.downloads == []
    assert warnings == []  # the status line, in view, says it: no pop-up as well


def test_the_api_says_the_files_could_not_be_saved(disk_full_handlers):
    handlers, _ = disk_full_handlers
    with pytest.raises(gr.Error, match=r"the run ended \(done\) but its files could not be saved on the server "
                                       r"\(No space left on device\)"):
        list(handlers.segment(str(ASSETS / "coffee.jpg"), "the cup"))


def test_with_gradios_cache_on_a_full_disk_the_answer_image_still_reaches_the_page(disk_full_handlers, monkeypatch):
    # The app's own files fail (disk_full_handlers), and so does every write into Gradio's cache: the Run tab's image
    # goes out in the message itself, so the page shows the status line the handler wrote, not a bare error.
    import asyncio
    import base64
    import io

    from gradio import processing_utils
    from PIL import Image

    from sam3_agent.ui.run.layout import _answer_columns

    def cache_disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    for name in ("save_pil_to_cache", "save_img_array_to_cache", "save_file_to_cache", "save_bytes_to_cache"):
        monkeypatch.setattr(processing_utils, name, cache_disk_full)
    handlers, _ = disk_full_handlers
    last = list(handlers.run(str(ASSETS / "coffee.jpg"), "the cup", 5, 0.5, RunSlot()))[-1]
    with gr.Blocks():
        panel = _answer_columns(True)
    sent = asyncio.run(processing_utils.async_move_files_to_cache(
        panel.final_image.postprocess(last.final_image), panel.final_image, postprocess=True))
    assert sent["path"] is None and sent["url"].startswith("data:image/png;base64,")
    with Image.open(io.BytesIO(base64.b64decode(sent["url"].split(",", 1)[1]))) as shown:
        assert shown.size == last.final_image.size
        assert shown.convert("RGB").tobytes() == last.final_image.convert("RGB").tobytes()
