"""The Correct tab's sessions: kept by key outside Gradio's state, dropped when idle, when their tab closes or when
memory runs short; a session too large is refused; on ZeroGPU only the point model's call takes a GPU."""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest
from conftest import photo
from PIL import Image
from test_ui_correct import (  # the Correct view's own fixtures
    FakePointSegmenter,
    clicked,
    line,
    make_trace,
    masks_of,
    stroked,
)

from sam3_agent.errors import InputError
from sam3_agent.sam.tracker import PointMask
from sam3_agent.ui.correct import actions as correct
from sam3_agent.ui.correct.handlers import CorrectHandlers
from sam3_agent.ui.correct.store import CorrectSessions
from sam3_agent.ui.correct.tools import TOOL_POSITIVE
from sam3_agent.ui.memory_size import held_bytes, image_bytes

BOX = (200, 50, 300, 250)
MIB = 1024**2


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def new_session(size: tuple[int, int] = (512, 512)) -> correct.CorrectSession:
    """A fresh session on a photo of ``size`` (width, height) with one agent mask."""
    width, height = size
    image = photo("astronaut.jpg").resize((width, height))
    final = masks_of([BOX], [0.9], size=(height, width))
    return correct.start_session(make_trace(image, [final], final))


def test_held_bytes_counts_each_buffer_once_and_a_view_as_its_base():
    base = np.zeros((100, 100), dtype=np.float32)          # 40,000 bytes
    image = Image.new("RGB", (10, 20))                      # 10 * 20 * 4 bytes in Pillow
    record = types.SimpleNamespace(a=base, b=base[10:20], c=[image, image, b"xyz"], d={"again": base})
    assert image_bytes(image) == 800
    assert held_bytes(record) == 40_000 + 800 + 3


def test_a_session_is_measured_by_its_photo_view_and_masks():
    # the photo and its view (Pillow RGB: 4 bytes per pixel), the agent's mask held once as COCO RLE in the trace
    # (types.Masks) and decoded once as the edit state's bool mask, its float32 score and its xyxy box
    for width, height in ((512, 512), (1024, 768)):
        session = new_session((width, height))
        rle_bytes = sum(len(counts) for counts in session.trace.final_masks.counts)
        assert 0 < rle_bytes < 1000  # a box-shaped mask is a few hundred bytes of runs
        assert held_bytes(session) == 2 * 4 * width * height + width * height + rle_bytes + 4 + 16


def test_an_unused_session_expires_after_its_time_to_live_and_its_exports_go_with_it(tmp_path):
    clock = Clock()
    dropped: list[str] = []
    store = CorrectSessions(ttl_s=600, on_drop=dropped.append, clock=clock)
    session = new_session()
    key = store.put(session, owner="tab-1")
    clock.now += 599
    assert store.get(key) is session          # a use restarts the clock
    clock.now += 599
    assert store.info()[0] == 1
    clock.now += 2
    with pytest.raises(InputError, match="no longer open .* 10 minutes after their last edit"):
        store.get(key)
    assert dropped == [key] and store.info() == (0, 0)


def test_a_session_larger_than_the_bound_is_refused_and_nothing_is_kept():
    small = new_session()
    store = CorrectSessions(max_session_bytes=held_bytes(small) + 1)
    store.put(small)
    with pytest.raises(InputError, match="would hold about 9 MB, more than the 2 MB one session may use"):
        store.put(new_session((1024, 1024)))
    assert store.info()[0] == 1


def test_an_edit_that_would_pass_the_bound_is_refused_and_the_session_stays_as_it_was(tmp_path):
    session = new_session()
    handlers = CorrectHandlers(lambda: FakePointSegmenter(), warn=lambda m: None, root=tmp_path,
                               sessions=CorrectSessions(max_session_bytes=held_bytes(session) + 1000))
    key = handlers.sessions.put(session)
    out = handlers.canvas(key, stroked("paint", line(0, 40, 15), 16))  # a new mask would add 512 * 512 bytes
    assert "more than the" in out.status and "Nothing was changed." in out.status
    assert handlers.session(key) is session


def test_when_sessions_together_pass_the_total_bound_the_least_recently_used_go_first():
    first, second, third = new_session(), new_session(), new_session()
    size = held_bytes(first)
    dropped: list[str] = []
    store = CorrectSessions(max_total_bytes=2 * size + size // 2, on_drop=dropped.append)
    a, b = store.put(first), store.put(second)
    store.get(a)                    # a is now the most recently used
    c = store.put(third)            # three do not fit: b goes
    assert dropped == [b] and store.get(a) is first and store.get(c) is third
    assert store.info() == (2, 2 * size)


def test_closing_a_tab_drops_only_that_tabs_sessions(tmp_path):
    handlers = CorrectHandlers(lambda: None, warn=lambda m: None, root=tmp_path)
    mine = handlers.sessions.put(new_session(), owner="tab-1")
    theirs = handlers.sessions.put(new_session(), owner="tab-2")
    _, export = handlers.export_coco(mine)
    handlers.drop_owner("tab-1")
    assert not Path(export).exists()
    assert handlers.session(theirs).key == theirs
    with pytest.raises(InputError):
        handlers.session(mine)


def test_the_app_unload_event_drops_the_closed_tabs_correction_sessions(tmp_path):
    from sam3_agent.ui.run.handlers import Handlers
    from sam3_agent.ui.run.runner import AgentFactory
    from sam3_agent.ui.settings import AppSettings

    handlers = Handlers(AgentFactory(AppSettings(), None, load_error="not loaded"), root=tmp_path)
    key = handlers.correct.sessions.put(new_session(), owner="tab-1")
    handlers.unload(types.SimpleNamespace(session_hash="tab-1"))
    assert handlers.correct.sessions.info() == (0, 0)
    assert "no longer open" in handlers.correct.undo(key).status


def test_loading_records_the_browser_session_that_owns_the_correction(tmp_path):
    handlers = CorrectHandlers(lambda: None, warn=lambda m: None, root=tmp_path)
    trace = new_session().trace
    run = types.SimpleNamespace(run=types.SimpleNamespace(trace=trace))
    key = handlers.from_run(run, request=types.SimpleNamespace(session_hash="tab-9")).session
    handlers.drop_owner("tab-8")
    assert handlers.session(key).trace is trace
    handlers.drop_owner("tab-9")
    assert handlers.sessions.info() == (0, 0)


def test_on_zerogpu_only_the_point_models_call_is_wrapped_and_the_session_stays_here(tmp_path):
    model = FakePointSegmenter()
    wrapped: list[object] = []

    def gpu(function):
        wrapped.append(function)

        def on_gpu(image, points, labels):
            mask = function(image, points, labels)
            return PointMask(mask.mask.copy(), mask.score)  # what comes back from a worker: a pickled copy
        return on_gpu

    handlers = CorrectHandlers(lambda: model, warn=lambda m: None, root=tmp_path, gpu=gpu)
    key = handlers.sessions.put(new_session())
    handlers.canvas(key, clicked(TOOL_POSITIVE, 60, 300))
    handlers.canvas(key, clicked(TOOL_POSITIVE, 70, 300))
    assert wrapped == [model.segment_points]           # wrapped once, not per click
    assert len(model.calls) == 2 and handlers.session(key).state.items[-1].origin == "clicks"
