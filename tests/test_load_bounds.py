"""What one upload may cost: mask sets of any allowed size load, and a load is refused before it decodes what the
session could not hold (issue 22, "Memory")."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import KnownSegmenter, photo, tool
from PIL import Image, ImageFile
from pycocotools import mask as coco_mask

from sam3_agent import rle
from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.errors import TraceFormatError
from sam3_agent.trace.io import load_trace_zip, trace_to_zip_bytes
from sam3_agent.ui.correct.handlers import CorrectHandlers
from sam3_agent.ui.correct.trace_upload import app_load_limits, trace_from_upload
from sam3_agent.ui.inspect.handlers import INSPECT_TEXTS, InspectHandlers
from sam3_agent.ui.memory_size import held_bytes
from sam3_agent.ui.session_store import SessionStore
from sam3_agent.vlm.scripted import ScriptedVLM

# ------------------------------------------------------------------ many masks in one set


def test_areas_of_more_than_255_masks_are_each_masks_pixel_count():
    masks = np.zeros((300, 20, 30), dtype=bool)
    for i in range(300):
        masks[i, : 1 + i % 20, : 1 + i % 30] = True
    counts = rle.encode(masks, 20, 30)
    assert rle.areas(counts, 20, 30).tolist() == [(1 + i % 20) * (1 + i % 30) for i in range(300)]


@pytest.fixture(scope="module")
def three_hundred_masks_zip(tmp_path_factory) -> str:
    """A run whose phrase found 300 masks (a 20 x 15 grid of 15 px squares on coffee.jpg), 100 of them selected."""
    boxes = [((20 * c, 20 * r, 20 * c + 15, 20 * r + 15), 0.9) for r in range(15) for c in range(20)]
    vlm = ScriptedVLM([tool("segment_phrase", text_prompt="dot"),
                       tool("select_masks_and_return", final_answer_masks=list(range(1, 101)))])
    trace = Agent(vlm, KnownSegmenter({"dot": boxes}), AgentConfig()).run(photo("coffee.jpg"), "dots")
    assert trace.status == "done", trace.error
    path = tmp_path_factory.mktemp("many") / "trace.zip"
    path.write_bytes(trace_to_zip_bytes(trace))
    return str(path)


def test_a_trace_with_300_masks_in_one_set_loads_and_renders_in_inspect(three_hundred_masks_zip):
    warnings: list[str] = []
    inspect = InspectHandlers(warnings.append)
    state, message, _, _, final_image, final_masks = inspect.load_trace(three_hundred_masks_zip)
    assert warnings == [] and "Done: 100 masks selected after 2 rounds" in message
    assert final_image["visible"] is True and final_image["value"] is not None and final_masks.count("<tr data-mask=") == 100
    round_html, _, timeline, _ = inspect.show_round(state, 1)
    assert "found masks: 300" in round_html and timeline.count('<tr class="timeline-') == 2


def test_a_trace_with_300_masks_in_one_set_opens_in_correct(three_hundred_masks_zip, tmp_path):
    warnings: list[str] = []
    outputs = CorrectHandlers(lambda: None, warnings.append, tmp_path / "app").upload(three_hundred_masks_zip)
    assert warnings == [] and "status-error" not in outputs.status


# ------------------------------------------------------------------ what a load will hold, before decoding


def blank_png(side: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("1", (side, side)).save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def with_photo(data: bytes, side: int) -> bytes:
    """``data`` (a trace .zip) with its photo replaced by a blank ``side`` x ``side`` 1-bit PNG and every mask set
    made that size (empty masks): what a hand-made hostile file looks like."""
    empty = coco_mask.encode(np.zeros((side, side, 1), dtype=np.uint8, order="F"))[0]["counts"].decode()
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        document = json.loads(src.read("trace.json"))
        photo_file = document["photo"]["file"].rsplit(".", 1)[0] + ".png"
        for info in src.infolist():
            body = src.read(info.filename)
            if info.filename == "trace.json":
                document["photo"].update(file=photo_file, width=side, height=side)
                body = json.dumps(document).encode()
            elif info.filename.startswith("masks/"):
                record = json.loads(body)
                record["size"] = [side, side]
                if "rle" in record:
                    record["rle"] = [empty] * len(record["rle"])
                body = json.dumps(record).encode()
            elif info.filename.startswith("images/photo-"):
                continue
            dst.writestr(info.filename, body)
        dst.writestr(photo_file, blank_png(side))
    return out.getvalue()


def via_inspect(path: str) -> str:
    warnings: list[str] = []
    state, status, *_ = InspectHandlers(warnings.append).load_trace(path)
    assert state is None and "status-error" in status
    return warnings[0]


def via_correct(path: str) -> str:
    warnings: list[str] = []
    outputs = CorrectHandlers(lambda: None, warnings.append, Path(path).parent / "app").upload(path)
    assert "Nothing was changed" in outputs.status
    return warnings[0]


@pytest.fixture
def decoded_sizes(monkeypatch) -> list[tuple[int, int]]:
    """The size of every image Pillow decodes while the test runs."""
    sizes: list[tuple[int, int]] = []
    original = ImageFile.ImageFile.load

    def watched(image):
        sizes.append(image.size)
        return original(image)

    monkeypatch.setattr(ImageFile.ImageFile, "load", watched)
    return sizes


@pytest.mark.parametrize("loader", [via_inspect, via_correct])
def test_a_tiny_zip_declaring_a_13000_px_photo_is_refused_before_decoding(three_hundred_masks_zip, tmp_path, loader,
                                                                           decoded_sizes):
    path = tmp_path / "bomb.zip"
    path.write_bytes(with_photo(Path(three_hundred_masks_zip).read_bytes(), 13000))
    assert path.stat().st_size < 10_000
    message = loader(str(path))
    assert "its photo is 13000x13000 pixels (169.0 MP), more than the 8.0 MP a trace may have here: open it on the " \
           "command line instead" in message
    assert (13000, 13000) not in decoded_sizes


@pytest.mark.parametrize("loader", [via_inspect, via_correct])
def test_a_photo_within_the_cap_with_many_masks_is_refused_on_its_estimate_before_decoding(
        three_hundred_masks_zip, tmp_path, loader, decoded_sizes):
    path = tmp_path / "many.zip"  # 7.84 MP: 31 MB as RGB, plus 100 full-size masks of 7.8 MB each
    path.write_bytes(with_photo(Path(three_hundred_masks_zip).read_bytes(), 2800))
    message = loader(str(path))
    assert "it would hold about 778 MB once loaded (a 2800x2800 photo and 100 full-size masks), more than the 512 MB " \
           "one session may use: open it on the command line instead" in message
    assert (2800, 2800) not in decoded_sizes


def test_the_command_line_reads_what_the_app_refuses(three_hundred_masks_zip):
    trace = load_trace_zip(with_photo(Path(three_hundred_masks_zip).read_bytes(), 2800))
    assert trace.image.size == (2800, 2800) and len(trace.final_masks) == 100


def test_a_larger_photo_loads_where_the_caller_raises_the_limit(three_hundred_masks_zip):
    data = with_photo(Path(three_hundred_masks_zip).read_bytes(), 3000)  # 9 MP: above the app's 8 MP
    with pytest.raises(TraceFormatError, match=r"its photo is 3000x3000 pixels \(9.0 MP\), more than the 8.0 MP"):
        trace_from_upload(data)
    limits = app_load_limits(max_image_pixels=10_000_000, max_session_bytes=2 * 1024**3)
    assert trace_from_upload(data, limits).image.size == (3000, 3000)


PEAK_SCRIPT = """
import resource, sys
from sam3_agent.ui.correct.handlers import CorrectHandlers
from sam3_agent.ui.inspect.handlers import INSPECT_TEXTS, InspectHandlers
from sam3_agent.ui.memory_size import held_bytes
from sam3_agent.ui.session_store import SessionStore
path, messages = sys.argv[1], []
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
InspectHandlers(messages.append).load_trace(path)
CorrectHandlers(lambda: None, messages.append, None).upload(path)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(len(messages), peak // 1024)
"""


@pytest.mark.slow
def test_refusing_the_13000_px_photo_costs_no_memory(three_hundred_masks_zip, tmp_path):
    path = tmp_path / "bomb.zip"  # 676 MB as RGB once decoded; +967 MB peak in either tab before this issue
    path.write_bytes(with_photo(Path(three_hundred_masks_zip).read_bytes(), 13000))
    done = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, str(path)], capture_output=True, text=True,
                          cwd=Path(__file__).parent.parent, timeout=120, check=True)
    refusals, peak_mb = (int(v) for v in done.stdout.split())
    assert refusals == 2 and peak_mb < 30, done.stdout


# ------------------------------------------------------------------ Inspect keeps traces in the bounded store


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Browser:
    """What Gradio hands a handler as ``gr.Request``: the browser session's id."""

    def __init__(self, session_hash: str) -> None:
        self.session_hash = session_hash


def test_an_inspected_trace_lives_in_the_store_until_its_time_to_live(three_hundred_masks_zip):
    clock = Clock()
    inspect = InspectHandlers(lambda message: None, store=SessionStore(ttl_s=600, clock=clock,
                                                                       texts=INSPECT_TEXTS))
    key = inspect.load_trace(three_hundred_masks_zip, None, Browser("tab-1"))[0]
    assert isinstance(key, str) and inspect.store.info()[0] == 1
    clock.now = 599
    assert "found masks: 300" in inspect.show_round(key, 1)[0]  # a use restarts the clock
    clock.now = 1199
    assert '<section class="round" data-round="2">' in inspect.show_round(key, 2)[0]
    clock.now = 1800
    round_html, _, timeline, _ = inspect.show_round(key, 1)
    assert "This inspected trace is no longer open (sessions close 10 minutes after their last use" in round_html
    assert "upload the trace again" in round_html and timeline == ""
    assert inspect.store.info() == (0, 0)


def test_an_inspected_trace_goes_when_its_tab_closes_or_loads_another(three_hundred_masks_zip):
    inspect = InspectHandlers(lambda message: None)
    first = inspect.load_trace(three_hundred_masks_zip, None, Browser("tab-1"))[0]
    second = inspect.load_trace(three_hundred_masks_zip, first, Browser("tab-1"))[0]  # the same tab, a new upload
    other = inspect.load_trace(three_hundred_masks_zip, None, Browser("tab-2"))[0]
    assert inspect.loaded(first) is None and inspect.store.info()[0] == 2
    inspect.drop_owner("tab-1")
    assert inspect.loaded(second) is None and inspect.loaded(other) is not None


def test_inspected_traces_together_stay_within_the_stores_total(three_hundred_masks_zip):
    probe = InspectHandlers(lambda message: None)
    size = held_bytes(probe.loaded(probe.load_trace(three_hundred_masks_zip)[0]))
    inspect = InspectHandlers(lambda message: None, store=SessionStore(max_total_bytes=2 * size + size // 2))
    keys = [inspect.load_trace(three_hundred_masks_zip, None, Browser(f"tab-{i}"))[0] for i in range(3)]
    assert inspect.loaded(keys[0]) is None and all(inspect.loaded(k) is not None for k in keys[1:])
    count, total = inspect.store.info()
    assert count == 2 and total <= 2 * size + size // 2


def test_a_set_of_many_masks_takes_one_masks_pixels_of_the_decode_budget():
    """Masks stay compressed and are drawn one at a time: 10 masks of 10x10 px cost 100 bytes of the budget, so a
    trace with hundreds of masks on a large photo reads back; one mask larger than the budget is still refused."""
    from sam3_agent.errors import TraceFormatError
    from sam3_agent.rle import encode_rle
    from sam3_agent.trace.safe_decode import DecodeBudget, mask_counts_for_image

    rles = encode_rle(np.ones((10, 10, 10), dtype=bool))
    budget = DecodeBudget(max_bytes=500)
    assert len(mask_counts_for_image(rles, 10, 10, "ten masks", budget)) == 10
    assert budget.left == 400
    with pytest.raises(TraceFormatError, match="more than"):
        mask_counts_for_image(encode_rle(np.ones((1, 30, 30), dtype=bool)), 30, 30, "a big mask", DecodeBudget(500))
