"""The package installs like one: the files the code loads ship inside it, a wheel built from the repository runs
the tiny command line and the library example from another folder, and CI installs and tests as README says.

The wheel test builds from a copy of the tracked files (the checkout stays clean), installs the wheel with
``--no-deps`` into a fresh virtual environment outside the checkout, and lends it this environment's
site-packages through a ``.pth`` file: offline, and seconds instead of the minutes (and 6 GB) of installing torch
again. ``pip check`` there proves the wheel's declared dependencies are met by what it was lent.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest
from test_readme import blocks, offline

from sam3_agent.package_files import ASSETS_DIR, EXAMPLE_SCRIPT, EXAMPLES_FILE, PACKAGE_DIR, PROMPTS_DIR

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
BUILD_FROM = ("pyproject.toml", "README.md", "sam3_agent")  # what the wheel is built from


def tracked(*paths: str) -> list[str]:
    done = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", *paths], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    return [line for line in done.stdout.splitlines() if "__pycache__" not in line]


def test_the_files_the_code_loads_lie_inside_the_package():
    assert PROMPTS_DIR == PACKAGE_DIR / "prompts" and ASSETS_DIR == PACKAGE_DIR / "assets"
    assert sorted(p.name for p in PROMPTS_DIR.iterdir()) == [
        "feedback.toml", "main_system.md", "native_feedback.toml", "native_reply.md", "verify_system.md"]
    examples = json.loads(EXAMPLES_FILE.read_text(encoding="utf-8"))
    assert all((ASSETS_DIR / item["image"]).is_file() for item in examples) and EXAMPLE_SCRIPT.is_file()


def test_every_non_python_file_of_the_package_is_declared_as_package_data():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    undeclared = []
    for path in tracked("sam3_agent"):
        if path.endswith(".py"):
            continue
        folder = Path(path).parent
        owners = [(pkg, pattern) for pkg, patterns in declared.items() for pattern in patterns
                  if Path(path).is_relative_to(Path(*pkg.split(".")))]
        if not any(fnmatch.fnmatch(str(Path(path).relative_to(Path(*pkg.split(".")))), pattern)
                   for pkg, pattern in owners):
            undeclared.append(f"{path} (in {folder})")
    assert undeclared == []


def test_ci_installs_and_tests_with_readmes_commands_exactly():
    setup = README[README.index("## Set up"):]
    install = blocks(setup)[0][2].splitlines()[0]
    test = blocks(README[README.index("## Test\n"):])[0][2].strip()
    assert install == "python3 -m venv .venv && . .venv/bin/activate && pip install -r requirements.txt"
    assert test == "python -m pytest -q"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert install in ci and test in ci


def library_example() -> str:
    """README's library example, with the offline stand-ins the README test applies (the tiny preset)."""
    section = README[README.index("## Library use"):]
    return offline(next(code for _, language, code in blocks(section) if language == "python"), None)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A fresh virtual environment outside the checkout with the wheel installed; its python and environment."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    for path in tracked(*BUILD_FROM):
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_bytes((ROOT / path).read_bytes())
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(work / "dist"),
                    str(source)], check=True, capture_output=True, timeout=300)
    (wheel,) = (work / "dist").glob("sam3_agent-*.whl")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)], check=True,
                   capture_output=True, timeout=300)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "lent_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    return python, env


def run_there(command: list[str], folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    folder.mkdir(exist_ok=True)
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_wheel_imports_its_own_copy_and_its_dependencies_are_met(installed, tmp_path):
    python, env = installed
    done = run_there([str(python), "-c", "import sam3_agent.package_files as f; print(f.PACKAGE_DIR)"], tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).is_relative_to(python.parent.parent)  # inside the venv, not this checkout
    checked = run_there([str(python), "-m", "pip", "check"], tmp_path, env)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.slow
def test_the_installed_command_runs_the_scripted_tiny_demo_from_another_folder(installed, tmp_path):
    python, env = installed
    folder = tmp_path / "elsewhere"
    helped = run_there(["sam3-agent", "run", "--help"], folder, env)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: sam3-agent run [-h]")
    where = run_there([str(python), "-c", "from sam3_agent.package_files import ASSETS_DIR; print(ASSETS_DIR)"],
                      folder, env)
    assets = Path(where.stdout.strip())
    done = run_there(["sam3-agent", "run", "--preset", "tiny", "--script", str(assets / "example_script.json"),
                      "--image", str(assets / "coffee.jpg"), "--query", "the spoon", "--out", "out"], folder, env)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^Finished: done after 3 round\(s\), \d+ final mask\(s\)$", done.stdout, re.M), done.stdout
    assert (folder / "out" / "trace.json").is_file() and (folder / "out" / "final_masks.json").is_file()


@pytest.mark.slow
def test_the_readme_library_example_runs_from_another_folder_on_the_wheel(installed, tmp_path):
    python, env = installed
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "example.py").write_text(library_example(), encoding="utf-8")
    done = run_there([str(python), "example.py"], folder, env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[0] == "RoundStarted" and (folder / "library_run" / "trace.json").is_file()
