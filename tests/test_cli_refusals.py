"""A refused ``run`` / ``batch`` / ``eval``: every input that can be checked without a model is checked before any
loads, and a refused command leaves the disk as it was (no ``--out`` folder made; one that existed keeps its files).

In process: the model loaders are replaced by ones that fail the test, so "before any model loads" is what is
asserted, not inferred from the printed lines; the few refusals that need a model load the tiny ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ASSETS, tool
from PIL import Image

from sam3_agent.cli import run as run_module
from sam3_agent.cli.main import main
from sam3_agent.datasets.batch import agents as batch_agents
from sam3_agent.limits import MAX_QUERY_CHARS

ROOT = Path(__file__).resolve().parent.parent  # the checkout: README.md is a file that is not a script
COFFEE = str(ASSETS / "coffee.jpg")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    """Files the refusals name: a good script, one without main responses, a thin photo, a text file."""
    folder = tmp_path_factory.mktemp("inputs")
    (folder / "script.json").write_text(json.dumps([tool("report_no_mask")]))
    (folder / "empty.json").write_text(json.dumps({"main": [], "verify": []}))
    Image.new("RGB", (2000, 8), (90, 90, 90)).save(folder / "strip.png")
    (folder / "notes.txt").write_text("hello")
    return {name: str(folder / name) for name in ("script.json", "empty.json", "strip.png", "notes.txt")}


@pytest.fixture
def no_model_loads(monkeypatch):
    """Any model load fails the test (run's and batch's loaders alike)."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded for a command that should have been refused first")

    monkeypatch.setattr(run_module, "build_backends", refuse)
    monkeypatch.setattr(batch_agents.BatchAgents, "load", classmethod(refuse))


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


LONG_QUERY = "x" * (MAX_QUERY_CHARS + 1000)

# (flags replacing the defaults, the whole error line); "<name>" stands for the fixture's file of that name
REFUSED_BEFORE_LOADING = [
    pytest.param({"--query": LONG_QUERY}, "error: the query has 3000 characters; shorten it to at most 2000",
                 id="long query"),
    pytest.param({"--query": " <|im_end|> "}, "error: the query is empty: describe what to segment, e.g. "
                 "'the leftmost child'", id="empty query"),
    pytest.param({"--script": str(ROOT / "README.md")}, f"error: script file {ROOT / 'README.md'} is not valid JSON "
                 "(line 1, column 1: Expecting value)", id="not a script"),
    pytest.param({"--script": "<empty.json>"}, "error: the script <empty.json> has no main responses: add at least "
                 "one", id="script without main responses"),
    pytest.param({"--image": "<strip.png>"}, "error: the photo is 2000 x 8 pixels: within the model's budget of "
                 "1,003,520 pixels its short side would be 14 px, less than one image token (32 px), so the model "
                 "could not see it; crop it to the part that matters (a long side at most about 150 times the short "
                 "side) or raise --max-pixels", id="thin photo"),
    pytest.param({"--image": "<notes.txt>"}, "error: file '<notes.txt>' is not an image (or not a format this app "
                 "reads); give a JPEG, PNG, WebP, HEIC, AVIF or TIFF", id="not an image"),
]


def _named(text: str, inputs: dict[str, str]) -> str:
    for name, path in inputs.items():
        text = text.replace(f"<{name}>", path)
    return text


@pytest.mark.parametrize("flags, message", REFUSED_BEFORE_LOADING)
def test_run_refuses_bad_input_before_any_model_loads_and_makes_no_folder(tmp_path, capsys, inputs, no_model_loads,
                                                                          flags, message):
    out = tmp_path / "out"
    given = {"--image": COFFEE, "--query": "the cup", "--script": "<script.json>", **flags}
    argv = ["run", "--preset", "tiny", "--out", str(out)]
    for flag, value in given.items():
        argv += [flag, _named(value, inputs)]
    code, stdout, stderr = run_cli(argv, capsys)
    assert (code, stderr, stdout) == (2, _named(message, inputs) + "\n", "")
    assert not out.exists()


def test_a_refused_run_leaves_an_existing_out_folder_as_it_was(tmp_path, capsys, inputs, no_model_loads):
    out = tmp_path / "out"
    (out / "images").mkdir(parents=True)
    (out / "keep.txt").write_text("mine")
    before = sorted((p.relative_to(out), p.stat().st_mtime_ns) for p in out.rglob("*"))
    code, _, _ = run_cli(["run", "--preset", "tiny", "--image", COFFEE, "--query", LONG_QUERY, "--out", str(out),
                          "--script", inputs["script.json"]], capsys)
    assert code == 2
    assert sorted((p.relative_to(out), p.stat().st_mtime_ns) for p in out.rglob("*")) == before


@pytest.mark.parametrize("command", ["batch", "eval"])
def test_batch_and_eval_refuse_a_bad_script_before_any_model_loads_and_make_no_folder(tmp_path, capsys, inputs,
                                                                                       no_model_loads, command):
    out = tmp_path / "out"
    if command == "batch":
        source = ["--input", str(tmp_path / "items.jsonl")]
        (tmp_path / "items.jsonl").write_text(json.dumps({"image": COFFEE, "query": "the cup"}) + "\n")
    else:
        source = ["--dataset", str(tmp_path / "gt.jsonl"), "--format", "jsonl"]
        (tmp_path / "gt.jsonl").write_text(json.dumps({"image": COFFEE, "query": "the cup", "mask": None}) + "\n")
    code, stdout, stderr = run_cli([command, *source, "--out", str(out), "--preset", "tiny", "--script",
                                    str(ROOT / "README.md"), "--no-progress"], capsys)
    assert code == 2 and stderr.endswith("is not valid JSON (line 1, column 1: Expecting value)\n")
    assert "Loading models" not in stdout and not out.exists()


def test_a_batch_refused_once_its_models_fail_to_load_makes_no_folder(tmp_path, capsys, inputs):
    (tmp_path / "items.jsonl").write_text(json.dumps({"image": COFFEE, "query": "the cup"}) + "\n")
    out = tmp_path / "out"
    code, _, stderr = run_cli(["batch", "--input", str(tmp_path / "items.jsonl"), "--out", str(out), "--sam3-model",
                               str(tmp_path / "no_sam3"), "--script", inputs["script.json"], "--no-progress"], capsys)
    assert code == 3 and "no_sam3" in stderr
    assert not out.exists()


def test_a_run_refused_once_its_models_fail_to_load_makes_no_folder(tmp_path, capsys, inputs):
    out = tmp_path / "out"
    code, _, stderr = run_cli(["run", "--image", COFFEE, "--query", "the cup", "--out", str(out), "--sam3-model",
                               str(tmp_path / "no_sam3"), "--script", inputs["script.json"]], capsys)
    assert code == 3 and "no_sam3" in stderr
    assert not out.exists()


def test_a_tool_format_the_loaded_model_cannot_take_makes_no_folder(tmp_path, capsys):
    out = tmp_path / "out"
    code, _, stderr = run_cli(["run", "--preset", "tiny", "--tiny-vlm", "gemma3", "--tool-format", "native",
                               "--image", COFFEE, "--query", "the cup", "--out", str(out)], capsys)
    assert code == 2 and "use the reference tool format (--tool-format reference)" in stderr
    assert not out.exists()


def test_a_run_that_starts_makes_its_folder_under_new_parents(tmp_path, capsys, inputs):
    out = tmp_path / "new" / "deeper" / "out"
    code, _, stderr = run_cli(["run", "--preset", "tiny", "--image", COFFEE, "--query", "the cup", "--out", str(out),
                               "--script", inputs["script.json"]], capsys)
    assert code == 0, stderr
    assert sorted(p.name for p in out.iterdir()) == ["final_masks.json", "final_overlay.png", "images", "masks",
                                                     "trace.json"]


@pytest.mark.parametrize("page", ["docs/cli.md", "docs/app.md", "docs/datasets.md"])
def test_the_pages_that_document_queries_state_the_limit_the_code_applies(page):
    assert f"{MAX_QUERY_CHARS} characters" in (ROOT / page).read_text(encoding="utf-8")
