"""The page's helpers and start-up: examples, the ZeroGPU cap and Space defaults, the first-start and demo notes, --help."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ASSETS

from sam3_agent.models.zerogpu import MAX_SECONDS_VARIABLE, whole_seconds
from sam3_agent.ui.run.layout import load_examples
from sam3_agent.ui.run.start import space_note
from sam3_agent.ui.settings import parse_settings


def test_examples_come_from_assets_examples_json_with_existing_photos():
    examples = load_examples()
    assert examples[0] == [str(ASSETS / "astronaut.jpg"), "the flag on the astronaut's shoulder"]
    assert len(examples) == len(json.loads((ASSETS / "examples.json").read_text()))
    assert all(Path(image).is_file() for image, _ in examples)


def test_unreadable_examples_give_none(tmp_path):
    bad = tmp_path / "examples.json"
    bad.write_text("[{\"image\": \"x.jpg\"}]")
    assert load_examples(bad) == [] and load_examples(tmp_path / "missing.json") == []


def test_no_gpu_call_asks_for_more_than_the_cap(monkeypatch):
    monkeypatch.delenv(MAX_SECONDS_VARIABLE, raising=False)
    assert [whole_seconds(s) for s in (0.2, 31.0, 31.01, 1000)] == [1, 31, 32, 300]
    monkeypatch.setenv(MAX_SECONDS_VARIABLE, "1200")
    assert whole_seconds(1000) == 1000


def test_a_zerogpu_space_defaults_to_a_budget_that_fits_a_visitors_quota(monkeypatch):
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    settings, _ = parse_settings([], environ={})
    assert (settings.max_rounds, settings.max_image_pixels) == (8, 4_000_000)
    assert (settings.backend.max_new_tokens, settings.backend.decoding.verify_max_new_tokens) == (512, 256)
    given, _ = parse_settings(["--max-rounds", "20"], environ={"SAM3_AGENT_MAX_NEW_TOKENS": "900"})
    assert (given.max_rounds, given.backend.max_new_tokens) == (20, 900)  # what the Space's owner sets wins
    tiny, _ = parse_settings(["--preset", "tiny"], environ={})
    assert tiny.backend.max_new_tokens is None  # the tiny preset keeps its own short budget
    monkeypatch.delenv("SPACES_ZERO_GPU")
    assert parse_settings([], environ={})[0].max_rounds == 30


def test_the_space_says_what_gpu_time_a_run_takes():
    assert space_note(8, 4_000_000) == (
        "On this Space every model call asks ZeroGPU for its own few seconds of GPU. Runs default to 8 rounds and "
        "photos up to 4 megapixels (such as 2449x1633), so that a run fits the 2 minutes of GPU a day ZeroGPU gives "
        "a visitor who is not logged in; log in to Hugging Face for 5 minutes a day.")


def test_missing_weights_do_not_stop_the_app_and_every_run_says_why(tmp_path):
    from sam3_agent.presets import BackendSettings
    from sam3_agent.ui.layout import build_demo
    from sam3_agent.ui.run.handlers import Handlers
    from sam3_agent.ui.run.runner import AgentFactory
    from sam3_agent.ui.run.slot import RunSlot
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
    blocks = {getattr(b, "elem_id", None): b for b in demo.blocks.values()}
    notice = blocks["model-notice"].value
    assert "Run is off: the models are not on this machine yet." in notice
    assert f"<li>SAM 3: <code>{missing}</code> (no such folder).</li>" in notice
    assert "<code>python app.py --preset tiny --script sam3_agent/assets/example_script.json</code>" in notice
    assert blocks["run-btn"].interactive is False
    assert "Run is off until the models load." in blocks["status"].value
    # said once: not in the status line, not as a pop-up
    assert "no folder at" not in blocks["status"].value and warnings == []
    (only,) = handlers.run(str(ASSETS / "coffee.jpg"), "the cup", 5, 0.5, RunSlot())  # a hand-made request
    assert 'class="status status-error"' in only.status and "no folder at" in only.status


def test_the_first_start_message_names_the_missing_models_the_hub_login_and_the_offline_way():
    from sam3_agent.ui.startup import NeededModel, first_start_message

    models = [NeededModel("SAM 3", "facebook/sam3", False), NeededModel("VLM", "Qwen/Qwen3-VL-8B-Instruct", False)]
    html = first_start_message(models, "cannot load the SAM 3 model 'facebook/sam3': offline")
    assert html.count("<li>") == 2 and "<code>Qwen/Qwen3-VL-8B-Instruct</code> (not downloaded yet)." in html
    assert "It is gated: accept its licence on" in html and "<code>hf auth login</code>" in html
    assert "--preset tiny --script sam3_agent/assets/example_script.json" in html
    assert "<details><summary>Details</summary><pre>cannot load the SAM 3 model" in html
    present = first_start_message([NeededModel("SAM 3", "facebook/sam3", True)], "out of memory on cuda:0")
    assert "Run is off: the models could not be loaded.</b> Out of memory on cuda:0." in present


def test_a_real_launch_needs_sam3_and_the_vlm_unless_a_server_or_script_replaces_it(tmp_path):
    from sam3_agent.presets import BackendSettings
    from sam3_agent.ui.settings import AppSettings
    from sam3_agent.ui.startup import needed_models

    real = needed_models(AppSettings(BackendSettings(preset="real", sam3_model=str(tmp_path))))
    assert [(m.role, m.present) for m in real] == [("SAM 3", True), ("VLM", False)]
    served = AppSettings(BackendSettings(preset="real", vlm_server="http://x/v1", vlm_server_model="q"))
    assert [m.role for m in needed_models(served)] == ["SAM 3"]
    assert needed_models(AppSettings(BackendSettings(preset="tiny"))) == []


@pytest.mark.parametrize(("preset", "script", "words"), [
    ("tiny", "sam3_agent/assets/example_script.json", "SAM 3 is a tiny model with random weights and the VLM's replies are "
                                           "replayed from <code>example_script.json</code>"),
    ("tiny", None, "both models are tiny with random weights, built on this machine: the VLM writes random text"),
    ("real", "s.json", "the VLM's replies are replayed from <code>s.json</code> (SAM 3 is the real model)"),
])
def test_the_page_says_when_the_models_are_random_or_scripted(preset, script, words):
    from sam3_agent.presets import BackendSettings
    from sam3_agent.ui.settings import AppSettings
    from sam3_agent.ui.startup import demo_note

    note = demo_note(AppSettings(BackendSettings(preset=preset, script=script)))
    assert note.startswith('<div class="notice notice-demo"><b>Demo mode:</b> ') and words in note
    assert demo_note(AppSettings(BackendSettings(preset="real"))) is None


def test_settings_show_model_names_never_server_paths(tmp_path):
    from sam3_agent.presets import BackendSettings
    from sam3_agent.ui.run.runner import AgentFactory
    from sam3_agent.ui.settings import AppSettings

    folder = tmp_path / "weights" / "my_sam3"
    info = AgentFactory(AppSettings(BackendSettings(sam3_model=str(folder), vlm_model="Qwen/Qwen3-VL-8B-Instruct")),
                        None, load_error="x").model_info()
    assert (info.sam3, info.vlm) == ("my_sam3 (local folder)", "Qwen/Qwen3-VL-8B-Instruct (not loaded)")
    tiny = AgentFactory(AppSettings(BackendSettings(preset="tiny")), None).model_info()
    assert (tiny.sam3, tiny.vlm) == ("tiny SAM 3, random weights", "tiny qwen3_vl, random weights")


def test_app_help_answers_without_importing_gradio_or_torch():
    import subprocess
    import sys

    code = ("import sys, app\ntry:\n    app.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', sorted(m for m in ('torch', 'gradio', 'transformers') if m in sys.modules))")
    root = Path(__file__).resolve().parent.parent  # where app.py lies
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert "--preset {real,tiny}" in done.stdout and "SAM3_AGENT_PRESET" in done.stdout
    assert done.stdout.strip().endswith("HEAVY []"), done.stdout[-300:] + done.stderr[-2000:]


def test_correct_and_review_events_share_one_queue_run_in_session_order(tmp_path):
    """Each Correct-tab event replaces the whole edit state: two of one session running at once would lose one of
    the edits, so each waits for its session's earlier ones (tests/test_session_order.py); sessions run side by side."""
    from sam3_agent.presets import BackendSettings
    from sam3_agent.ui.layout import build_demo
    from sam3_agent.ui.run.handlers import Handlers
    from sam3_agent.ui.run.runner import AgentFactory
    from sam3_agent.ui.session_order import EDIT_CONCURRENCY
    from sam3_agent.ui.settings import AppSettings

    settings = AppSettings(BackendSettings(preset="tiny"))
    demo = build_demo(Handlers(AgentFactory.load(settings), warn=lambda _m: None, root=tmp_path / "app"), settings)
    names = {"canvas", "style", "set_shown", "select", "relabel", "delete", "undo", "redo", "bring_in",
             "export_coco", "export_polygons", "export_yolo", "export_pngs", "export_bundle", "export_trace"}
    fns = [f for f in demo.fns.values() if getattr(f.fn, "__name__", "") in names or f.concurrency_id == "correct-edits"]
    found = {getattr(f.fn, "__name__", "") for f in fns}
    assert names <= found
    assert {(f.concurrency_id, f.concurrency_limit) for f in fns} == {("correct-edits", EDIT_CONCURRENCY)}
    assert EDIT_CONCURRENCY == 4 and len(fns) == 25  # the Correct tab's 19 events and the Review tab's 6
    assert all(getattr(f.fn, "in_session_order", False) for f in fns)
