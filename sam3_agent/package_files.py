"""The files the package ships and loads: the prompt texts and the example assets (photos, example queries, the
scripted demo's replies), found beside this module whether the code runs from a clone or from an installed wheel.

Nothing is imported here beyond the standard library: the command line's ``--help`` and start notes name these
files before any model library loads.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PROMPTS_DIR = PACKAGE_DIR / "prompts"  # system prompts and every feedback message sent to the model
ASSETS_DIR = PACKAGE_DIR / "assets"  # photos, a clip (licences in LICENSE.md there), queries, the demo script
EXAMPLES_FILE = ASSETS_DIR / "examples.json"  # the app's example photos and queries
VIDEO_EXAMPLES_FILE = ASSETS_DIR / "video_examples.json"  # the app's example clips and queries
EXAMPLE_SCRIPT = ASSETS_DIR / "example_script.json"  # VLM replies for the scripted demo (``--script``)


def shown_path(path: Path, cwd: Path | None = None) -> str:
    """``path`` as a command typed in ``cwd`` (default: the current folder) should name it: relative when it lies
    under ``cwd`` (``assets/example_script.json`` in a clone), else absolute (an installed package's file)."""
    here = (Path.cwd() if cwd is None else cwd).resolve()
    return path.relative_to(here).as_posix() if path.is_relative_to(here) else str(path)
