"""Review records and the queue, below the app: a rerun sets an old review aside, a stale or unreadable review is not
applied, the manifest is checked before its paths are used, and a .zip is unpacked with bounded reads."""

from __future__ import annotations

import json
import os
import re
import shutil
import zipfile
from pathlib import Path

import pytest
from dataset_fixtures import review_batch

from sam3_agent.datasets.batch.items import read_items
from sam3_agent.datasets.batch.layout import BatchLayout
from sam3_agent.datasets.review.decisions import (
    ACCEPTED,
    NO_RECORD,
    REVIEW_FILE,
    ReviewConflict,
    read_review,
    save_review,
)
from sam3_agent.datasets.review.queue import ReviewQueue
from sam3_agent.datasets.review.sources import folder_under_root, unpack_batch_zip
from sam3_agent.errors import InputError


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return review_batch(tmp_path_factory.mktemp("batch"))


@pytest.fixture
def batch(template, tmp_path) -> Path:
    shutil.copytree(template, tmp_path / "out")
    return tmp_path / "out"


def accept_first(batch: Path) -> ReviewQueue:
    queue = ReviewQueue.open(batch)
    opened = queue.open_item(0)
    queue.save(opened, ACCEPTED, (), opened.revision)
    return queue


def test_a_rerun_of_an_item_sets_its_review_aside(batch, template):
    accept_first(batch)
    items = read_items(template.parent / "items.jsonl")
    BatchLayout(batch, items).begin_item(items[0])  # the cup runs again
    names = sorted(p.name for p in (batch / "items" / "cup").iterdir() if p.name.startswith("review"))
    assert len(names) == 1 and names[0].startswith("review.set-aside-") and names[0].endswith(".json")
    assert json.loads((batch / "items" / "cup" / names[0]).read_text())["state"] == "accepted"


def test_a_review_of_another_trace_is_not_applied_and_is_kept_aside_on_save(batch):
    accept_first(batch)
    trace_file = batch / "items" / "cup" / "trace.json"
    trace_file.write_text(trace_file.read_text() + "\n")  # another run's trace: another digest
    queue = ReviewQueue.open(batch)
    opened = queue.open_item(0)
    assert (opened.state, opened.revision) == ("not_reviewed", 1)
    assert "made on an earlier run of this item" in opened.note
    assert queue.progress().sentence == "1 of 3 reviewed (1 accepted, 0 corrected)"  # the file is still there
    record = queue.save(opened, ACCEPTED, (), opened.revision)
    assert record.revision == 2 and record.trace_sha256 == opened.trace_sha256
    assert len(list((batch / "items" / "cup").glob("review.set-aside-*.json"))) == 1


def test_an_unreadable_review_is_reported_and_never_overwritten(batch):
    (batch / "items" / "cup" / REVIEW_FILE).write_text("{not json")
    read = read_review(batch / "items" / "cup")
    assert read.record is None and read.problem.startswith("review.json cannot be read")
    queue = ReviewQueue.open(batch)
    opened = queue.open_item(0)
    assert opened.state == "not_reviewed" and "its saved review was not applied" in opened.note
    queue.save(opened, ACCEPTED, (), opened.revision)
    [aside] = (batch / "items" / "cup").glob("review.set-aside-*.json")
    assert aside.read_text() == "{not json"


def test_a_save_expecting_an_older_revision_is_refused(batch):
    folder = batch / "items" / "cup"
    save_review(folder, "cup", ACCEPTED, (), "abc", NO_RECORD)
    with pytest.raises(ReviewConflict, match=r"someone else saved a review of this item since you opened it \(accepted"):
        save_review(folder, "cup", ACCEPTED, (), "abc", NO_RECORD)
    assert read_review(folder).record.revision == 1


def test_a_manifest_pointing_outside_the_batch_is_refused(batch, tmp_path):
    manifest = json.loads((batch / "manifest.json").read_text())
    manifest["items"][0]["folder"] = "items/../../elsewhere"
    (batch / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="has an unknown status or a folder outside items/"):
        ReviewQueue.open(batch)
    manifest["items"][0]["folder"] = "items/cup"
    (batch / "manifest.json").write_text(json.dumps(manifest))
    shutil.rmtree(batch / "items" / "cup")
    os.symlink(tmp_path, batch / "items" / "cup")  # a link leading out
    with pytest.raises(InputError, match="leads outside the batch folder"):
        ReviewQueue.open(batch)


def test_folders_are_opened_only_under_the_review_root(batch, tmp_path):
    assert folder_under_root(tmp_path, "out") == batch.resolve()
    assert folder_under_root(tmp_path, str(batch)) == batch.resolve()  # absolute, but inside
    os.symlink(Path("/"), tmp_path / "escape")
    for text in ("../", "/etc", "escape/etc"):
        with pytest.raises(InputError, match="is outside the review folder"):
            folder_under_root(tmp_path, text)


def test_a_zip_is_unpacked_with_bounded_reads(batch, tmp_path):
    archive = tmp_path / "batch.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zipped:
        for path in sorted(batch.rglob("*")):
            if path.is_file():
                zipped.write(path, path.relative_to(batch).as_posix())
        zipped.writestr("items/cup/images/huge.png", b"\0" * 3_000_000)  # compresses to a few kB
        zipped.writestr("/etc/evil.json", "{}")
        zipped.writestr("items/cup/../../evil.json", "{}")
    with pytest.raises(InputError, match="larger than 2 MB once unpacked"):
        unpack_batch_zip(archive, tmp_path / "store", max_unpacked=2 * 2**20)
    assert not (tmp_path / "store").exists() or not list((tmp_path / "store").iterdir())  # nothing half-unpacked
    folder, reopened = unpack_batch_zip(archive, tmp_path / "store")
    assert not reopened and not list((tmp_path / "store").rglob("evil.json"))
    assert [item.id for item in ReviewQueue.open(folder).items] == ["cup", "dog", "flag"]
    assert unpack_batch_zip(archive, tmp_path / "store") == (folder, True)


@pytest.mark.parametrize(("flags", "size", "expected"), [
    (0x1, None, "holds an encrypted file ('manifest.json')"),
    (None, 10, "the .zip is damaged (Bad CRC-32 for file 'manifest.json')"),  # read only as far as it declares
])
def test_a_zip_member_that_is_encrypted_or_inflates_past_its_size_is_refused(batch, tmp_path, flags, size, expected):
    from test_safe_read import patch_headers  # the same hand-made faults every trace loader refuses

    archive = tmp_path / "batch.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zipped:
        for path in sorted(batch.rglob("*")):
            if path.is_file():
                zipped.write(path, path.relative_to(batch).as_posix())
    archive.write_bytes(patch_headers(archive.read_bytes(), "manifest.json", size=size, flags=flags))
    with pytest.raises(InputError, match=re.escape(expected)):
        unpack_batch_zip(archive, tmp_path / "store")
    assert not (tmp_path / "store").exists() or not list((tmp_path / "store").iterdir())  # nothing half-unpacked


def test_a_zip_made_on_windows_with_backslash_separators_opens_and_its_first_item_loads(batch, tmp_path):
    archive = tmp_path / "batch.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zipped:
        for path in sorted(batch.rglob("*")):
            if path.is_file():
                zipped.write(path, "out\\" + str(path.relative_to(batch).as_posix()).replace("/", "\\"))
    assert "out\\items\\cup\\trace.json" in zipfile.ZipFile(archive).namelist()
    folder, reopened = unpack_batch_zip(archive, tmp_path / "store")
    queue = ReviewQueue.open(folder)
    assert (reopened, [item.id for item in queue.items], [item.id for item in queue.skipped]) == (
        False, ["cup", "dog", "flag"], ["lost"])
    opened = queue.open_item(0)
    assert (opened.item.id, opened.trace.query, opened.trace.status) == ("cup", "the cup", "done")
