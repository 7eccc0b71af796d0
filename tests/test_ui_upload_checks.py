"""An upload in the Run tab gets the checks a run will make (the VLMs' own pixel bounds included), at once, in words
for the page's visitor (never a launch flag); Run says the same."""

from __future__ import annotations

from html import unescape
from pathlib import Path

import pytest
from conftest import KnownSegmenter, tool
from PIL import Image

from sam3_agent.presets import Backends
from sam3_agent.ui.run.handlers import Handlers
from sam3_agent.ui.run.runner import AgentFactory
from sam3_agent.ui.run.slot import RunSlot
from sam3_agent.ui.settings import AppSettings
from sam3_agent.vlm.image_fit import ImageLimits
from sam3_agent.vlm.scripted import ScriptedVLM

THIN = ("The photo is 2000 x 8 pixels: within the model's budget of 1,003,520 pixels its short side would be 14 px, "
        "less than one image token (32 px), so the model could not see it; crop it to the part that matters (a long "
        "side at most about 150 times the short side).")
SMALL_BOUNDS = ImageLimits.with_bounds(None, 50_000)  # a launch with --max-pixels 50000


def status_text(html: str) -> str:
    return unescape(html.split(">", 1)[1].rsplit("</div>", 1)[0])


def handlers_with(tmp_path: Path, verifier_limits: ImageLimits | None = None) -> Handlers:
    """Handlers on loaded (scripted) models; ``verifier_limits``: what the verifier's processor accepts."""
    vlm, verifier = ScriptedVLM([tool("report_no_mask")]), ScriptedVLM([])
    if verifier_limits is not None:
        verifier.image_limits = verifier_limits
    backends = Backends(vlm, verifier, KnownSegmenter({}), {"vlm_model": "scripted"})
    return Handlers(AgentFactory(AppSettings(max_rounds=5), backends), warn=lambda _: None, root=tmp_path / "app")


def upload(tmp_path: Path, size: tuple[int, int], name: str) -> str:
    path = tmp_path / "upload" / name  # Gradio keeps the upload's own name last in its path
    path.parent.mkdir(exist_ok=True)
    Image.new("RGB", size, (90, 90, 90)).save(path)
    return str(path)


def test_a_photo_too_thin_for_the_model_is_refused_as_soon_as_it_is_uploaded(tmp_path):
    status, image = handlers_with(tmp_path).uploaded(upload(tmp_path, (2000, 8), "strip.png"))
    assert status_text(status) == f"{THIN} Upload another photo."
    assert 'class="status status-error"' in status and image is None  # the box is emptied for the next one


def test_run_refuses_that_photo_in_the_same_words(tmp_path):
    outputs = list(handlers_with(tmp_path).run(upload(tmp_path, (2000, 8), "strip.png"), "the line", 5, 0.5,
                                               RunSlot()))
    assert len(outputs) == 1 and status_text(outputs[0].status) == THIN


@pytest.mark.parametrize("limits, refused", [(None, False), (SMALL_BOUNDS, True)])
def test_an_upload_is_checked_at_the_pixel_bounds_of_the_loaded_models(tmp_path, limits, refused):
    # 2000 x 20: over one 32 px token tall at the default bounds, 18 px at 50,000 pixels (the verifier's here)
    status, _ = handlers_with(tmp_path, verifier_limits=limits).uploaded(upload(tmp_path, (2000, 20), "line.png"))
    text = status_text(status)
    if refused:
        assert text == ("The photo is 2000 x 20 pixels: within the model's budget of 50,000 pixels its short side "
                        "would be 18 px, less than one image token (32 px), so the model could not see it; crop it to "
                        "the part that matters (a long side at most about 150 times the short side). Upload another "
                        "photo.")
    else:
        assert text == "Photo ready: add a query (if there is none yet), then press Run."


def test_a_photo_the_models_take_is_ready(tmp_path):
    status, image = handlers_with(tmp_path).uploaded(upload(tmp_path, (600, 40), "band.png"))
    assert status_text(status) == "Photo ready: add a query (if there is none yet), then press Run."
    assert image == {"__type__": "update"}  # no change: the photo stays
