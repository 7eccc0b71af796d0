"""Every ``bash`` and ``python`` block of README.md and of ``docs/`` runs as written, offline, on the tiny preset.

The rule: fenced blocks whose info string is exactly ``bash`` or ``python`` are run in order (README.md first, then
the pages of ``docs/`` in ``DOC_PAGES`` order, which every page must be listed in), all in one
scratch folder that links ``sam3_agent/`` and ``tests/`` (relative paths work as in a clone) with this checkout on PYTHONPATH (as after
``pip install -e .``); a later block may use what an earlier one wrote (``out/`` of the command-line run). A bash block
runs command by command (a trailing ``\\`` continues a line; ``#`` starts a comment); a python block runs as one
script. Blocks with any other info string (command output, plain text) are not run.

Offline, ``OFFLINE`` stands in for what needs the network: the tiny preset (random weights, built locally) for the
real models, and an app this test starts for the API's URL. ``SKIPPED`` lists the commands that cannot or need not
run here, each with why. A README command that fails here: make it run offline, or add it to ``SKIPPED`` with the
reason.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# docs/ pages in the order their blocks run: a later page may use what an earlier one wrote (out/ of the CLI run)
DOC_PAGES = ("cli.md", "video.md", "app.md", "serving.md", "replies.md", "gpu.md", "traces.md", "decoding.md", "models.md",
             "correcting.md", "datasets.md", "benchmark.md", "reference.md", "testing.md")
DOCS = [README] + [ROOT / "docs" / name for name in DOC_PAGES]
COMMAND_TIMEOUT_S = 600  # one command or script, on a busy 2-core machine
APP_URL = "http://127.0.0.1:7860/"  # where the README's API example expects the app

# Command prefixes that are not run, and why.
SKIPPED = {
    "python3 -m venv": "creates the environment this test already runs in (.ci/run does it on CI)",
    "pip install": "installs packages into the environment this test runs in; CI installs them in .ci/run",
    "python app.py": "starts the web server, which runs until stopped; tests/browser start it and drive it",
    "python -m pytest": "the test suite itself",
    "python -m sam3_agent.bench.families": "takes minutes; tests/test_bench_families.py runs it at a tiny size",
    "python -m sam3_agent.bench.labels": "the python block after it runs the same on one photo; tests/"
                                         "test_label_legibility.py and tests/test_dense_tiles.py run its measures",
    "python -m sam3_agent.bench.video": "takes minutes; tests/test_bench_video.py runs it at 30 and 60 frames",
    "python -m sam3_agent.bench": "takes minutes; tests/test_speed_small_and_bench.py runs the benchmark's code",
    "vllm serve": "serves the VLM on a CUDA GPU with the vllm package; tests/test_vlm_openai_server.py drives the "
                  "client against a local server",
    "python -m sam3_agent run --vlm-server": "talks to the vLLM server above, which needs a GPU",
    "python -m sam3_agent.smoke": "checks the real models (their weights in the Hugging Face cache) on a CUDA GPU",
    "python -m sam3_agent.bench.batch": "takes tens of minutes; tests/test_datasets_bench.py runs its code on the "
                                           "tiny models",
    "python -m sam3_agent batch --input items.jsonl": "the user's own item list; the eval example below runs a batch "
                                                      "on the fixture dataset, tests/test_datasets_batch.py the rest",
    "python -m sam3_agent batch --input photos/": "the user's own folder of photos; tests/test_datasets_batch.py runs "
                                                  "folder input",
    "CUDA_VISIBLE_DEVICES=": "a vLLM server or Ray node on a CUDA GPU",
    "python -m sam3_agent eval --format reasonseg --dataset ReasonSeg/": "the downloaded ReasonSeg dataset; the "
                                                                        "fixture example below runs offline",
    "python -m sam3_agent eval --format refcoco --dataset refer/": "the downloaded RefCOCO data; tests/"
                                                                   "test_datasets_formats.py reads the fixture",
    "python -m sam3_agent eval --format jsonl --dataset my_gt.jsonl": "the user's own ground truth; tests/"
                                                                      "test_datasets_formats.py reads the fixture",
    "python -m sam3_agent eval --format revos --dataset ReVOS ": "the downloaded ReVOS dataset; the fixture example "
                                                                 "below runs offline",
}

# Offline stand-ins: (pattern, replacement, why). The real models are gated and about 20 GB; the tiny preset runs
# the same code on random weights, and the example script keeps a command-line run to its three rounds.
OFFLINE = [
    (re.compile(r"^python -m sam3_agent run (?!.*--preset)"),
     "python -m sam3_agent run --preset tiny --script sam3_agent/assets/example_script.json ",
     "a command-line run on the real models"),
    (re.compile(r'preset="real"'), 'preset="tiny"', "library use of the real models"),
    (re.compile(r'build_point_segmenter\("real"\)'), 'build_point_segmenter("tiny")', "the real point-prompt model"),
]


def blocks(text: str) -> list[tuple[int, str, str]]:
    """``(line number, language, code)`` of every fenced ``bash`` / ``python`` block of a Markdown text, in order."""
    found = []
    for match in re.finditer(r"^```(bash|python)[ \t]*\n(.*?)^```[ \t]*$", text, re.M | re.S):
        found.append((text.count("\n", 0, match.start()) + 1, match.group(1), match.group(2)))
    return found


def commands(code: str) -> list[str]:
    """The commands of a bash block: continued lines joined, blank lines and whole-line comments left out."""
    joined = re.sub(r"[ \t]*\\\n\s*", " ", code)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def skip_reason(command: str) -> str | None:
    """Why ``command`` is not run (``SKIPPED``), or ``None``."""
    return next((why for prefix, why in SKIPPED.items() if command.startswith(prefix)), None)


def offline(code: str, app_url: str | None) -> str:
    """``code`` with the offline stand-ins (``OFFLINE``) applied line by line, and the app's URL when one runs."""
    lines = []
    for line in code.splitlines():
        for pattern, replacement, _why in OFFLINE:
            line = pattern.sub(replacement, line)
        lines.append(line)
    text = "\n".join(lines) + "\n"
    return text.replace(APP_URL, app_url) if app_url else text


DOC_BLOCKS = [(path.relative_to(ROOT).as_posix(), line, language, code)
              for path in DOCS for line, language, code in blocks(path.read_text(encoding="utf-8"))]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """The folder the snippets run in, with ``sam3_agent`` (its photos) and ``tests`` linked, and their environment."""
    folder = tmp_path_factory.mktemp("readme")
    (folder / "sam3_agent").symlink_to(ROOT / "sam3_agent", target_is_directory=True)  # sam3_agent/assets/, as in a clone
    (folder / "tests").symlink_to(ROOT / "tests", target_is_directory=True)  # the fixture datasets, as in a clone
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
           "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    return folder, env


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    """A tiny-preset app for the API example, started only when the README has one."""
    if not any(APP_URL in code for _, _, language, code in DOC_BLOCKS if language == "python"):
        yield None
        return
    sys.path.insert(0, str(ROOT / "tests" / "browser"))
    from browser_app import running_app

    args = ("--preset", "tiny", "--script", str(ROOT / "sam3_agent" / "assets" / "example_script.json"))
    with running_app(tmp_path_factory.mktemp("app"), {"HF_HUB_OFFLINE": "1"}, args=args) as url:
        yield url


def run(command: list[str], folder: Path, env: dict[str, str], what: str) -> None:
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    assert done.returncode == 0, (
        f"{what} failed (exit {done.returncode}); make it run offline on the tiny preset or list it in SKIPPED "
        f"in {Path(__file__).name} with the reason.\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-5000:]}")


def test_every_docs_page_is_listed():
    assert sorted(p.name for p in (ROOT / "docs").glob("*.md")) == sorted(DOC_PAGES)


@pytest.mark.parametrize(("page", "line", "language", "code"), DOC_BLOCKS,
                         ids=[f"{page}:{line}-{language}" for page, line, language, _ in DOC_BLOCKS])
def test_the_readme_block_runs(scratch, app_url, page, line, language, code):
    folder, env = scratch
    if language == "python":
        script = folder / f"{Path(page).stem}_line{line}.py"
        script.write_text(offline(code, app_url), encoding="utf-8")
        run([sys.executable, script.name], folder, env, f"the python block at {page} line {line}")
        return
    runnable = [c for c in commands(code) if skip_reason(c) is None]
    if not runnable:
        pytest.skip("; ".join(sorted({skip_reason(c) or "" for c in commands(code)})))
    for command in runnable:
        run(["bash", "-c", offline(command, app_url)], folder, env,
            f"the command `{command}` at {page} line {line}")


def test_the_readme_examples_leave_the_files_they_promise(scratch):
    """After the blocks above: the command-line run, the correction example and the export wrote their files."""
    folder, _ = scratch
    promised = ["out/trace.json", "out/final_masks.json", "out/final_overlay.png", "masks.json", "bundle.zip",
                "spoon.json", "spoon.zip", "spoon_masks"]
    text = "\n".join(path.read_text(encoding="utf-8") for path in DOCS)
    missing = [name for name in promised if name.split("/")[-1] in text and not (folder / name).exists()]
    assert not missing, f"README examples did not write {missing}"


def test_the_extraction_rule_and_the_skip_list():
    text = "x\n```bash\npython a.py \\\n  --flag 1\n# a comment\n\npip install -e .\n```\n```\nplain\n```\n" \
           "```python\nprint(1)\n```\n"
    found = blocks(text)
    assert [(line, language) for line, language, _ in found] == [(2, "bash"), (12, "python")]
    assert commands(found[0][2]) == ["python a.py --flag 1", "pip install -e ."]
    assert [skip_reason(c) is None for c in commands(found[0][2])] == [True, False]
    assert offline('BackendSettings(preset="real")\npython -m sam3_agent run --image x', None) == (
        'BackendSettings(preset="tiny")\n'
        "python -m sam3_agent run --preset tiny --script sam3_agent/assets/example_script.json --image x\n")
    assert skip_reason("python -m sam3_agent run --vlm-server http://127.0.0.1:8000/v1 --image x") is not None
