"""The page's helpers: examples from assets/examples.json and the spaces.GPU wrapper."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

from conftest import ASSETS

from sam3_agent.ui.layout import load_examples, run_gpu_seconds
from sam3_agent.zerogpu import MAX_SECONDS_VARIABLE, gpu


def test_examples_come_from_assets_examples_json_with_existing_photos():
    examples = load_examples()
    assert examples[0] == [str(ASSETS / "astronaut.jpg"), "the flag on the astronaut's shoulder"]
    assert len(examples) == len(json.loads((ASSETS / "examples.json").read_text()))
    assert all(Path(image).is_file() for image, _ in examples)


def test_unreadable_examples_give_none(tmp_path):
    bad = tmp_path / "examples.json"
    bad.write_text("[{\"image\": \"x.jpg\"}]")
    assert load_examples(bad) == [] and load_examples(tmp_path / "missing.json") == []


def test_gpu_is_a_no_op_without_the_spaces_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "spaces", None)  # import spaces -> ImportError

    def handler():
        return 1

    assert gpu(handler, 60) is handler


def test_gpu_wraps_handlers_with_spaces_gpu_and_a_duration_that_fits_the_round_budget(monkeypatch):
    calls = []

    def fake_gpu(duration):
        def wrap(function):
            calls.append((function.__name__, duration))
            return function
        return wrap

    monkeypatch.setitem(sys.modules, "spaces", types.SimpleNamespace(GPU=fake_gpu))
    monkeypatch.delenv(MAX_SECONDS_VARIABLE, raising=False)

    def run():
        return 1

    assert gpu(run, run_gpu_seconds)() == 1 and calls == [("run", run_gpu_seconds)]
    # Handlers.run(image, query, max_rounds, score_threshold, slot): 30 s to start + 30 s per round, at most 300 s
    assert [run_gpu_seconds("photo.jpg", "the cup", rounds, 0.5, None) for rounds in (1, 5, 9, 30)] == [60, 180, 300, 300]
    monkeypatch.setenv(MAX_SECONDS_VARIABLE, "1200")
    assert run_gpu_seconds("photo.jpg", "the cup", 30, 0.5, None) == 930


def test_missing_weights_do_not_stop_the_app_and_every_run_says_why(tmp_path):
    from sam3_agent.presets import BackendSettings
    from sam3_agent.ui.handlers import Handlers, RunSlot
    from sam3_agent.ui.layout import build_demo
    from sam3_agent.ui.runner import AgentFactory
    from sam3_agent.ui.settings import AppSettings

    missing = tmp_path / "no_sam3_here"
    settings = AppSettings(BackendSettings(preset="real", sam3_model=str(missing),
                                           vlm_server="http://127.0.0.1:9/v1", vlm_server_model="qwen"))
    factory = AgentFactory.load(settings)
    assert factory.backends is None and f"Could not load SAM 3 from the folder '{missing}'" in factory.load_error
    assert factory.model_info().vlm == "qwen at http://127.0.0.1:9/v1 (not loaded)"
    warnings: list[str] = []
    handlers = Handlers(factory, warn=warnings.append, root=tmp_path / "app")
    demo = build_demo(handlers, settings)
    banner = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "load-error"]
    assert len(banner) == 1 and "The models could not be loaded" in banner[0].value
    (only,) = handlers.run(str(ASSETS / "coffee.jpg"), "the cup", 5, 0.5, RunSlot())
    assert 'class="status status-error"' in only.status and "no folder at" in only.status
    assert len(warnings) == 1


def test_correct_tab_events_share_one_serial_queue(tmp_path):
    """Each Correct-tab event replaces the whole edit state: two running at once would lose one of the edits."""
    from sam3_agent.presets import BackendSettings
    from sam3_agent.ui.handlers import Handlers
    from sam3_agent.ui.layout import build_demo
    from sam3_agent.ui.runner import AgentFactory
    from sam3_agent.ui.settings import AppSettings

    settings = AppSettings(BackendSettings(preset="tiny"))
    demo = build_demo(Handlers(AgentFactory.load(settings), warn=lambda _m: None, root=tmp_path / "app"), settings)
    names = {"click", "set_shown", "select", "relabel", "delete", "undo", "redo", "paint", "erase", "bring_in",
             "export_coco", "export_pngs", "export_bundle", "export_trace"}
    fns = [f for f in demo.fns.values() if getattr(f.fn, "__name__", "") in names or f.concurrency_id == "correct-edits"]
    found = {getattr(f.fn, "__name__", "") for f in fns}
    assert names <= found
    assert {(f.concurrency_id, f.concurrency_limit) for f in fns} == {("correct-edits", 1)}
