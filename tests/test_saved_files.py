"""Every file the product saves (a run's folder, the app's trace.zip, a bundle from ``export --bundle`` or the Correct
tab) loads through the public ``sam3_agent.load_trace`` / ``load_trace_zip`` and every front end's loader; a file that
is not one is told exactly what it is: cut short, not a .zip, a .zip of something else, a folder without a trace, a
text file."""

from __future__ import annotations

import contextlib
import io
import zipfile
from pathlib import Path

import pytest
from conftest import people_run, rect_mask

import sam3_agent
from sam3_agent.cli.main import main
from sam3_agent.correct.edits import EditState, paint
from sam3_agent.errors import TraceFormatError
from sam3_agent.trace.io import save_trace, trace_to_zip_bytes
from sam3_agent.ui.correct.handlers import CorrectHandlers
from sam3_agent.ui.correct.trace_upload import trace_from_upload
from sam3_agent.ui.run.handlers import Handlers
from sam3_agent.ui.run.runner import AgentFactory
from sam3_agent.ui.settings import AppSettings

CUT_SHORT = ("the file is damaged or incomplete (e.g. a download cut short): it begins as a .zip but its end is "
             "missing; download or save it again")
NOT_A_ZIP = "the file is not a .zip trace or bundle (saved by SAM3 Agent)"
NOT_OURS = "the .zip is whole but holds no trace.json or bundle.json: it is not a SAM3 Agent trace or bundle"


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[sam3_agent.Trace, Path]:
    """A run with one hand edit, saved every way the product saves it, and files that are not traces, in one folder."""
    folder = tmp_path_factory.mktemp("saved")
    trace = people_run()
    edited = paint(EditState.from_trace(trace), 0, rect_mask(512, 512, 0, 0, 30, 30)).to_trace(trace)
    save_trace(edited, folder / "run")  # what `run --out run` writes
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["export", str(folder / "run"), "--bundle", str(folder / "bundle.zip")]) == 0
    whole = trace_to_zip_bytes(edited)  # the app's trace.zip download (and the Correct tab's trace export)
    (folder / "trace.zip").write_bytes(whole)
    (folder / "cut_trace.zip").write_bytes(whole[: len(whole) // 2])  # a download cut short
    bundle = (folder / "bundle.zip").read_bytes()
    (folder / "cut_bundle.zip").write_bytes(bundle[: len(bundle) // 2])
    (folder / "notes.zip").write_text("my notes about the run")
    other = io.BytesIO()
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("photos/cat.jpg", b"not ours")
    (folder / "photos.zip").write_bytes(other.getvalue())
    (folder / "empty").mkdir()
    (folder / "notes.txt").write_text("my notes about the run")
    return edited, folder


@pytest.mark.parametrize("name", ["run", "run/trace.json", "trace.zip", "bundle.zip"])
def test_every_saved_form_loads_with_the_public_loader(saved, name):
    edited, folder = saved
    assert sam3_agent.load_trace(folder / name) == edited
    assert sam3_agent.load_trace(str(folder / name)) == edited


@pytest.mark.parametrize("name", ["trace.zip", "bundle.zip"])
def test_every_saved_zip_loads_from_its_bytes_and_as_an_upload(saved, name):
    edited, folder = saved
    assert sam3_agent.load_trace_zip((folder / name).read_bytes()) == edited
    assert trace_from_upload(str(folder / name)) == edited


# ------------------------------------------------------------------ what each front end says


def public_loader(path: Path, tmp: Path) -> str:
    with pytest.raises(TraceFormatError) as refused:
        sam3_agent.load_trace(path)
    return str(refused.value)


def inspect_tab(path: Path, tmp: Path) -> str:
    warnings: list[str] = []
    handlers = Handlers(AgentFactory(AppSettings(), None, None, "not loaded"), warn=warnings.append, root=tmp / "app")
    state, *_ = handlers.inspect.load_trace(str(path))
    assert state is None and len(warnings) == 1
    return warnings[0]


def correct_tab(path: Path, tmp: Path) -> str:
    warnings: list[str] = []
    outputs = CorrectHandlers(lambda: None, warnings.append, tmp / "app").upload(str(path))
    assert "Nothing was changed" in outputs.status and len(warnings) == 1
    return warnings[0]


def cli_export(path: Path, tmp: Path) -> str:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["export", str(path), "--coco", str(tmp / "masks.json")]) == 2
    assert not (tmp / "masks.json").exists()
    return err.getvalue()


# how each front end words the loader's message ``m``
SAYS = {public_loader: "{m}", inspect_tab: "Cannot read this trace: {m}.", correct_tab: "Cannot read this file: {m}",
        cli_export: "error: {m}\n"}


@pytest.mark.parametrize("front_end", list(SAYS), ids=lambda f: f.__name__)
@pytest.mark.parametrize("name, message", [
    ("cut_trace.zip", CUT_SHORT),
    ("cut_bundle.zip", CUT_SHORT),
    ("notes.zip", NOT_A_ZIP),
    ("photos.zip", NOT_OURS),
])
def test_a_zip_that_is_no_trace_is_told_what_it_is(saved, tmp_path, front_end, name, message):
    assert front_end(saved[1] / name, tmp_path) == SAYS[front_end].format(m=message)


def test_a_zip_cut_short_is_told_so_from_its_bytes_too(saved):
    with pytest.raises(TraceFormatError) as refused:
        sam3_agent.load_trace_zip((saved[1] / "cut_bundle.zip").read_bytes())
    assert str(refused.value) == CUT_SHORT


@pytest.mark.parametrize("front_end", [public_loader, cli_export], ids=lambda f: f.__name__)
def test_a_folder_without_a_trace_or_a_text_file_is_told_what_it_is(saved, tmp_path, front_end):
    folder = saved[1]
    empty, notes = str(folder / "empty"), str(folder / "notes.txt")
    assert front_end(folder / "empty", tmp_path) == SAYS[front_end].format(
        m=f"the folder {empty!r} holds no trace.json: it is not a SAM3 Agent trace folder; give the folder a run "
          "wrote (its --out), its trace.json, or a trace or bundle .zip")
    assert front_end(folder / "notes.txt", tmp_path) == SAYS[front_end].format(
        m=f"{notes!r} is neither a folder nor a .zip: give a trace folder (or its trace.json), or a trace or bundle "
          ".zip saved by SAM3 Agent")


@pytest.mark.parametrize("front_end", [inspect_tab, correct_tab], ids=lambda f: f.__name__)
def test_a_text_file_uploaded_as_a_trace_is_not_a_zip(saved, tmp_path, front_end):
    assert front_end(saved[1] / "notes.txt", tmp_path) == SAYS[front_end].format(m=NOT_A_ZIP)
