"""The tiny preset says at start what its random weights mean, and without ``--script`` how to run the guided demo
(the command line before its models load, the app in its page note); the example script is named as typed from the
current folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ASSETS

from sam3_agent.cli import run as cli_run
from sam3_agent.cli.main import main
from sam3_agent.errors import EXIT_BACKEND, BackendError
from sam3_agent.package_files import EXAMPLE_SCRIPT, shown_path

ROOT = Path(__file__).resolve().parent.parent
COFFEE = str(ASSETS / "coffee.jpg")
SCRIPT_IN_CLONE = "sam3_agent/assets/example_script.json"  # the example script as typed in the repository's root


@pytest.fixture
def no_models(monkeypatch):
    """Model loading fails at once (the notes come before it, so nothing needs to load)."""
    def refuse(settings):
        raise BackendError("no models in this test")

    monkeypatch.setattr(cli_run, "build_backends", refuse)


def test_the_example_script_is_named_relative_to_the_folder_it_lies_under_else_absolute(tmp_path):
    assert EXAMPLE_SCRIPT.is_file()
    assert shown_path(EXAMPLE_SCRIPT, ROOT) == SCRIPT_IN_CLONE
    assert shown_path(EXAMPLE_SCRIPT, tmp_path) == str(EXAMPLE_SCRIPT)


def test_a_tiny_run_without_a_script_says_before_loading_how_to_run_the_guided_demo(tmp_path, capsys, monkeypatch,
                                                                                   no_models):
    monkeypatch.chdir(ROOT)
    code = main(["run", "--preset", "tiny", "--image", COFFEE, "--query", "the cup", "--out", str(tmp_path / "o")])
    out, err = capsys.readouterr()
    assert code == EXIT_BACKEND and err == "error: no models in this test\n"
    assert out == (
        "Note: the tiny preset's models have random weights: the VLM writes random text, so this run shows the code "
        "paths only and will likely spend its whole round budget (exit 4).\n"
        f"      For the guided demo, replay the example replies: add --script {SCRIPT_IN_CLONE}\n"
        "Loading models...\n")


def test_a_scripted_tiny_run_says_only_that_the_masks_are_random(tmp_path, capsys, no_models):
    main(["run", "--preset", "tiny", "--script", str(EXAMPLE_SCRIPT), "--image", COFFEE, "--query", "the cup",
          "--out", str(tmp_path / "o")])
    assert capsys.readouterr().out == (
        "Note: the tiny preset's SAM 3 has random weights: its masks mean nothing (the replies are scripted).\n"
        "Loading models...\n")


def test_a_real_run_has_no_demo_note(tmp_path, capsys, no_models):
    main(["run", "--image", COFFEE, "--query", "the cup", "--out", str(tmp_path / "o")])
    assert capsys.readouterr().out == "Loading models...\n"


def test_the_page_of_a_tiny_launch_without_a_script_says_how_to_start_the_guided_demo(monkeypatch):
    from sam3_agent.presets import BackendSettings
    from sam3_agent.ui.settings import AppSettings
    from sam3_agent.ui.startup import demo_note

    monkeypatch.chdir(ROOT)
    assert demo_note(AppSettings(BackendSettings(preset="tiny"))) == (
        '<div class="notice notice-demo"><b>Demo mode:</b> both models are tiny with random weights, built on this '
        "machine: the VLM writes random text, so a run shows the code paths only and usually spends its whole round "
        f"budget. For the guided demo, replay the example replies: <code>python app.py --preset tiny --script "
        f"{SCRIPT_IN_CLONE}</code>.</div>")
