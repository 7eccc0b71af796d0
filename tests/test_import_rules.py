"""The package keeps its house rules (``import_rules``), and the checker catches each kind of break."""

from __future__ import annotations

from pathlib import Path

import pytest
from import_rules import FLOORS, module_names, violations, wing_of

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_keeps_its_import_rules():
    assert violations(ROOT) == []


def test_every_wing_of_the_package_has_a_floor():
    assert {wing_of(m) for m in module_names(ROOT)} <= set(FLOORS)


def _house(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in {"sam3_agent/__init__.py": "", **files}.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


def test_a_clean_house_has_no_violation(tmp_path):
    root = _house(tmp_path, {
        "sam3_agent/errors.py": "",
        "sam3_agent/agent/__init__.py": "",
        "sam3_agent/agent/loop.py": "from ..errors import X\nfrom . import tools\n",
        "sam3_agent/agent/tools.py": "from .. import errors\n",
        "sam3_agent/ui/__init__.py": "import gradio as gr\n",
    })
    assert violations(root) == []


def test_a_planted_circle_is_found(tmp_path):
    root = _house(tmp_path, {
        "sam3_agent/agent/__init__.py": "",
        "sam3_agent/agent/loop.py": "from .tools import run\n",
        "sam3_agent/agent/tools.py": "def f():\n    from .loop import Agent\n",  # inside a function still counts
    })
    assert violations(root) == ["import circle: sam3_agent.agent.loop -> sam3_agent.agent.tools"]


def test_a_planted_arrow_that_runs_up_is_found(tmp_path):
    root = _house(tmp_path, {
        "sam3_agent/trace/__init__.py": "",
        "sam3_agent/trace/encode.py": "from ..correct.edits import replay\n",
        "sam3_agent/correct/__init__.py": "",
        "sam3_agent/correct/edits.py": "",
    })
    assert violations(root) == [
        "sam3_agent/trace/encode.py:1: sam3_agent.trace.encode (trace, floor 5) imports sam3_agent.correct.edits "
        "(correct, floor 6): arrows run down"]


def test_two_wings_on_one_floor_may_not_import_each_other(tmp_path):
    root = _house(tmp_path, {
        "sam3_agent/models/__init__.py": "",
        "sam3_agent/models/hub.py": "from ..imaging import render\n",
        "sam3_agent/imaging/__init__.py": "",
        "sam3_agent/imaging/render.py": "",
    })
    assert len(violations(root)) == 1 and "arrows run down" in violations(root)[0]


@pytest.mark.parametrize("line", ["from sam3_agent.errors import X", "import sam3_agent.errors"])
def test_a_planted_absolute_import_is_found(tmp_path, line):
    root = _house(tmp_path, {"sam3_agent/errors.py": "", "sam3_agent/rle.py": line + "\n"})
    assert violations(root) == [
        "sam3_agent/rle.py:1: imports sam3_agent.errors absolutely; inside the package imports are relative"]


def test_gradio_outside_the_app_is_found(tmp_path):
    root = _house(tmp_path, {"sam3_agent/agent/__init__.py": "", "sam3_agent/agent/loop.py": "import gradio\n"})
    assert violations(root) == ["sam3_agent/agent/loop.py:1: imports gradio; only ui, bench, smoke import Gradio"]


def test_a_new_wing_needs_a_floor(tmp_path):
    root = _house(tmp_path, {"sam3_agent/stuff/__init__.py": "", "sam3_agent/stuff/x.py": "from .. import errors\n",
                             "sam3_agent/errors.py": ""})
    assert violations(root) == ["sam3_agent/stuff/x.py:1: wing 'stuff' has no floor in FLOORS"]
