"""The review queue's handlers on a real batch output (``dataset_fixtures.review_batch``: the batch code with a scripted
VLM over known rectangles): states saved on disk, next / previous / accept, a correction made in the Correct tab's
session, the exported COCO file, a restart, two reviewers on one item, .zip uploads and folders outside the root."""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from pathlib import Path

import pytest
from dataset_fixtures import review_batch
from pycocotools.coco import COCO

from sam3_agent.datasets.review.decisions import REVIEW_FILE
from sam3_agent.datasets.review.exports import EXPORT_FILE
from sam3_agent.edit_ops import DeleteMask, RelabelMask
from sam3_agent.ui.correct.handlers import CorrectHandlers
from sam3_agent.ui.review.handlers import ReviewHandlers, ReviewSlot

FLAG_AREA = 95 * 340  # the flag's known rectangle (0, 0, 95, 340) on astronaut.jpg


@pytest.fixture(scope="module")
def batch_template(tmp_path_factory) -> Path:
    return review_batch(tmp_path_factory.mktemp("batch"))


@pytest.fixture
def root(batch_template, tmp_path) -> Path:
    """A review root holding a fresh copy of the batch output as ``batch/``."""
    shutil.copytree(batch_template, tmp_path / "reviews" / "batch")
    return tmp_path / "reviews"


def make(root: Path, tmp_path: Path, name: str = "app") -> ReviewHandlers:
    correct = CorrectHandlers(lambda: None, warn=lambda message: None, root=tmp_path / name)
    return ReviewHandlers(correct, tmp_path / name, review_root=root)


def saved(root: Path, item: str) -> dict | None:
    path = root / "batch" / "items" / item / REVIEW_FILE
    return json.loads(path.read_text()) if path.exists() else None


def test_open_next_previous_accept_and_correct_save_states_on_disk(root, tmp_path):
    review = make(root, tmp_path)
    out = review.open_folder("batch", None)
    slot = out.slot
    assert (slot.position, slot.item, slot.revision) == (0, "cup", 0)
    assert "Item 1 of 3: cup, “the cup” · agent: done · review: not reviewed · 0 of 3 reviewed (0 accepted, 0 " \
           "corrected)" in out.position
    assert "1 item(s) without a trace are not in the queue" in out.status  # the failed item 'lost'
    assert out.table.count("<tr") == 4 and 'class="review-current" data-state="not_reviewed"><td>1</td><td>cup' \
        in out.table
    key = out.correct.session
    correct = review.correct
    assert correct.session(key).trace.query == "the cup"

    # correct the cup (delete its only mask) and accept: saved as corrected, the dog opens
    correct.delete(correct.select(key, 0).session)
    out = review.accept(slot, key)
    record = saved(root, "cup")
    assert (record["state"], record["revision"], [op["op"] for op in record["edits"]]) == ("corrected", 1, ["delete"])
    assert (out.slot.position, out.slot.item) == (1, "dog")
    assert "Saved item cup: corrected with 1 edit, saved " in out.status
    assert "1 of 3 reviewed (0 accepted, 1 corrected)" in out.position

    # accept the dog as it is
    out = review.accept(out.slot, out.correct.session)
    assert (saved(root, "dog")["state"], saved(root, "dog")["edits"]) == ("accepted", [])
    assert out.slot.item == "flag"

    # relabel the flag's mask, then Previous: the change is saved (corrected) before the dog opens
    key = out.correct.session
    correct.relabel(correct.select(key, 0).session, "flag pole")
    out = review.step(out.slot, key, -1)
    assert out.slot.item == "dog"
    assert saved(root, "flag")["state"] == "corrected"
    assert "2 of 3 reviewed (1 accepted, 1 corrected)" not in out.position
    assert "3 of 3 reviewed (1 accepted, 2 corrected)" in out.position
    # Next without a change writes nothing; Next at the last item stays there
    out = review.step(out.slot, out.correct.session, 1)
    assert (out.slot.item, saved(root, "flag")["revision"]) == ("flag", 1)
    out = review.step(out.slot, out.correct.session, 1)
    assert out.slot.item == "flag"
    assert [e.label for e in review.correct.session(out.correct.session).state.items] == ["flag pole"]

    # the export: the batch's image ids, the corrected masks, a category for the new label
    status, path = review.export(out.slot)
    assert Path(path) == root / "batch" / EXPORT_FILE
    assert "Exported reviewed_coco.json: 3 images, 1 mask." in status
    document = json.loads(Path(path).read_text())
    assert [(i["id"], i["item_id"], i["review"], i["width"], i["height"]) for i in document["images"]] == [
        (1, "cup", "corrected", 600, 400), (2, "dog", "accepted", 451, 300), (3, "flag", "corrected", 512, 512)]
    assert document["categories"] == [{"id": 1, "name": "the cup"}, {"id": 2, "name": "the dog"},
                                      {"id": 3, "name": "the flag"}, {"id": 4, "name": "flag pole"}]
    [annotation] = document["annotations"]
    assert (annotation["image_id"], annotation["category_id"], annotation["bbox"], annotation["area"]) == (
        3, 4, [0.0, 0.0, 95.0, 340.0], FLAG_AREA)
    coco = COCO(str(path))  # loads with pycocotools; the decoded mask is the flag's rectangle
    mask = coco.annToMask(coco.loadAnns([annotation["id"]])[0])
    assert (int(mask.sum()), int(mask[:340, :95].sum())) == (FLAG_AREA, FLAG_AREA)


def test_a_restart_finds_every_decision_and_correction(root, tmp_path):
    first = make(root, tmp_path)
    out = first.open_folder("batch", None)
    key = out.correct.session
    first.correct.delete(first.correct.select(key, 0).session)
    first.accept(out.slot, key)

    again = make(root, tmp_path, "restarted")  # a new process: nothing in memory
    out = again.open_folder("batch", None)
    assert out.slot.item == "dog"  # the first item not reviewed
    assert "1 of 3 reviewed (0 accepted, 1 corrected)" in out.position
    out = again.step(out.slot, out.correct.session, -1)
    session = again.correct.session(out.correct.session)
    assert (out.slot.item, out.slot.revision) == ("cup", 1)
    assert [type(op) for op in session.state.applied] == [DeleteMask]
    assert [item.deleted for item in session.state.items] == [True]
    assert "review: corrected" in out.position
    _, path = again.export(out.slot)  # items not reviewed are left out, image and all
    document = json.loads(Path(path).read_text())
    assert ([i["item_id"] for i in document["images"]], document["annotations"], document["info"]["left_out"]) == (
        ["cup"], [], ["dog", "flag"])
    _, path = again.export(out.slot, include_unreviewed=True)  # or added with the agent's masks
    document = json.loads(Path(path).read_text())
    assert [(i["id"], i["item_id"], i["review"]) for i in document["images"]] == [
        (1, "cup", "corrected"), (2, "dog", "not_reviewed"), (3, "flag", "not_reviewed")]
    assert [(a["image_id"], a["category_id"], a["bbox"]) for a in document["annotations"]] == [
        (3, 3, [0.0, 0.0, 95.0, 340.0])]


def test_undoing_every_edit_of_an_item_never_accepted_makes_it_not_reviewed_again(root, tmp_path):
    review = make(root, tmp_path)
    out = review.open_folder("batch", None)
    key = out.correct.session
    review.correct.relabel(review.correct.select(key, 0).session, "mug")
    out = review.step(out.slot, key, 1)
    assert saved(root, "cup")["state"] == "corrected"
    out = review.step(out.slot, out.correct.session, -1)
    key = out.correct.session
    assert [type(op) for op in review.correct.session(key).state.applied] == [RelabelMask]
    review.correct.undo(key)
    out = review.step(out.slot, key, 1)
    assert (saved(root, "cup")["state"], saved(root, "cup")["edits"]) == ("not_reviewed", [])
    assert "0 of 3 reviewed" in out.position


def test_another_reviewers_save_is_never_overwritten_silently(root, tmp_path):
    mine, theirs = make(root, tmp_path, "mine"), make(root, tmp_path, "theirs")
    out_mine = mine.open_folder("batch", None)
    out_theirs = theirs.open_folder("batch", None)
    theirs.accept(out_theirs.slot, out_theirs.correct.session)  # they accept the cup first
    refused = mine.accept(out_mine.slot, out_mine.correct.session)
    assert "Someone else saved a review of this item since you opened it (accepted" in refused.status
    assert (saved(root, "cup")["state"], saved(root, "cup")["revision"]) == ("accepted", 1)
    assert refused.slot.conflict and refused.slot.item == "cup"
    # Accept again: mine is saved over theirs, knowingly
    key = out_mine.correct.session
    mine.correct.delete(mine.correct.select(key, 0).session)
    mine.accept(refused.slot, key)
    assert (saved(root, "cup")["state"], saved(root, "cup")["revision"]) == ("corrected", 2)


def test_a_zip_of_the_batch_opens_and_keeps_its_reviews(root, tmp_path):
    archive = tmp_path / "batch.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in sorted((root / "batch").rglob("*")):
            if path.is_file():
                zipped.write(path, "batch/" + path.relative_to(root / "batch").as_posix())
        zipped.writestr("batch/../escaped.json", "{}")  # never written outside the copy
    review = make(None, tmp_path)
    out = review.open_zip(str(archive), None)
    assert (out.slot.item, "Item 1 of 3" in out.position) == ("cup", True)
    review.accept(out.slot, out.correct.session)
    again = review.open_zip(str(archive), None)  # the same .zip again: the same copy, with its review
    assert again.slot.item == "dog" and Path(again.slot.folder) == Path(out.slot.folder)
    assert not list(tmp_path.rglob("escaped.json"))


def test_bad_sources_are_refused_with_what_to_do(root, tmp_path):
    review = make(root, tmp_path)
    assert "is outside the review folder" in review.open_folder("../..", None).status
    assert "There is no manifest.json in items" in review.open_folder("batch/items", None).status
    assert "upload a .zip of the batch output instead" in make(None, tmp_path).open_folder("batch", None).status
    not_zip = tmp_path / "notes.zip"
    not_zip.write_text("hello")
    assert "The file is not a .zip" in review.open_zip(str(not_zip), None).status
    assert "open a batch output" in review.accept(None, None).status.lower()


def test_a_batch_zip_cut_short_is_told_so(root, tmp_path):
    whole = io.BytesIO()
    with zipfile.ZipFile(whole, "w") as archive:
        for path in sorted((root / "batch").rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(root / "batch").as_posix())
    cut = tmp_path / "batch.zip"
    cut.write_bytes(whole.getvalue()[: len(whole.getvalue()) // 2])  # an upload or download that stopped early
    assert ("The file is damaged or incomplete (e.g. an upload or download cut short): it begins as a .zip but its "
            "end is missing; zip the batch output folder again and upload the new .zip") in make(root, tmp_path).open_zip(
                str(cut), None).status


def test_accept_refuses_when_the_correct_tab_shows_another_trace(root, tmp_path):
    review = make(root, tmp_path)
    out = review.open_folder("batch", None)
    other = review.correct.load(review.correct.session(out.correct.session).trace).session  # e.g. a run's trace
    refused = review.accept(out.slot, other)
    assert "The Correct tab now shows another trace, not item cup" in refused.status
    assert saved(root, "cup") is None
    assert isinstance(out.slot, ReviewSlot)


def test_accept_after_the_correction_session_closed_reopens_the_item(root, tmp_path):
    from sam3_agent.ui.correct.store import CorrectSessions

    now = [0.0]
    correct = CorrectHandlers(lambda: None, warn=lambda message: None, root=tmp_path / "app",
                              sessions=CorrectSessions(ttl_s=60, clock=lambda: now[0]))
    review = ReviewHandlers(correct, tmp_path / "app", review_root=root)
    out = review.open_folder("batch", None)
    now[0] = 61.0  # the session expires
    again = review.accept(out.slot, out.correct.session)
    assert saved(root, "cup") is None  # nothing was saved on an edit state nobody saw
    assert "The correction session of item cup had closed, so it was opened again" in again.status
    assert again.slot.item == "cup" and correct.session(again.correct.session).trace.query == "the cup"


def test_uploads_without_a_review_root_are_said_to_be_temporary(root, tmp_path):
    archive = tmp_path / "batch.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in sorted((root / "batch").rglob("*")):
            if path.is_file():
                zipped.write(path, path.relative_to(root / "batch").as_posix())  # the batch at the top
    kept = make(root, tmp_path).open_zip(str(archive), None)
    assert Path(kept.slot.folder).parent == root / ".uploads" and "last only while it runs" not in kept.status
    temporary = make(None, tmp_path, "plain").open_zip(str(archive), None)
    assert Path(temporary.slot.folder).parent == tmp_path / "plain" / "review"
    assert "the reviews of an upload last only while it runs: export the reviewed dataset" in temporary.status
