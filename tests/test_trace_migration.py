"""Traces saved in schema version 1 (tests/data/v1, written by the code before the format changed) still load,
keep what the model saw, and save again in the current version."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import resampled_alike

from sam3_agent.correct.edits import EditState
from sam3_agent.correct.export import load_bundle
from sam3_agent.edit_ops import BringInMask, BrushStroke, ClickMask, DeleteMask, RelabelMask, ToggleMask
from sam3_agent.imaging.labels import overlay_labels
from sam3_agent.imaging.overlay import render_numbered_overlay
from sam3_agent.imaging.views import render_mask_views
from sam3_agent.trace.io import load_trace, load_trace_zip, save_trace, trace_to_zip_bytes
from sam3_agent.types import SCHEMA_VERSION

V1 = Path(__file__).resolve().parent / "data" / "v1"


@pytest.fixture(scope="module")
def old_run():
    return load_trace(V1 / "run")


def test_a_version_1_folder_loads_with_every_round(old_run):
    assert old_run.schema_version == 1 and old_run.status == "done" and old_run.query == "the child in front"
    assert [r.error for r in old_run.rounds] == ["no_tool_call", None, None, None, None]
    assert [len(r.result.masks) if r.result.masks is not None else None for r in old_run.rounds] == [
        None, 3, 3, 2, 2]
    verdicts = old_run.rounds[3].result.verdicts
    assert [(v.verdict, v.source) for v in verdicts] == [("accept", "model"), ("reject", "model"), ("accept", "model")]
    assert len(old_run.final_masks) == 2 and old_run.image.size == (64, 48) and old_run.image_name == "blocks.png"
    assert old_run.rounds[3].context.dropped == (2, 3, 4, 5) and '"person"' in old_run.rounds[3].context.note


def test_rounds_saved_before_the_reasoning_was_stored_get_it_from_their_output(old_run):
    assert [r.reasoning for r in old_run.rounds] == ["no tool here"] + ["reasoning"] * 4


def test_version_1_images_stay_the_stored_pixels_and_todays_renderer_draws_them_again_but_for_the_digits(old_run):
    # The views come back as stored pixels (what the model saw) ...
    overlay = old_run.messages[7].images[0]
    assert overlay.name == "round3_overlay" and overlay.view is None
    # ... and drawing them again from the stored photo and masks gives those pixels, except around the labels: since
    # renderer 3 the digits are our own glyphs (OpenCV's font metrics change between releases), so a label's box and
    # digits differ by a few pixels; fills, contours and every pixel over 2 px from today's label boxes are unchanged.
    for r in old_run.rounds[1:4]:
        drawn = np.asarray(render_numbered_overlay(old_run.image, r.result.masks))
        stored = np.asarray(r.result.reply.images[0].image)
        near_labels = np.zeros(drawn.shape[:2], dtype=bool)
        for placement in overlay_labels(r.result.masks).placements:
            x0, y0, x1, y1 = placement.box
            near_labels[max(0, y0 - 2):y1 + 2, max(0, x0 - 2):x1 + 2] = True
        assert near_labels.mean() < 0.4, r.index  # most of the overlay is compared
        assert np.array_equal(drawn[~near_labels], stored[~near_labels]), r.index
    # the single-mask view is drawn to the same pixels; the zoom view's enlarged crop is resampled by Pillow since
    # renderer 5 (OpenCV's bicubic, used before, depends on the CPU): alike as two resamplings, not the same pixels
    examined = old_run.rounds[2].result.masks
    for v in old_run.rounds[3].result.verdicts:
        mask_view, zoom_view = render_mask_views(old_run.image, examined, v.mask_number - 1)
        assert np.array_equal(np.asarray(mask_view), np.asarray(v.mask_view.image))
        alike, mean, largest = resampled_alike(zoom_view, v.zoom_view.image)
        assert alike, (v.mask_number, mean, largest)


def test_a_migrated_trace_saves_in_the_current_version_and_loads_equal(old_run, tmp_path):
    save_trace(old_run, tmp_path)
    document = json.loads((tmp_path / "trace.json").read_text())
    assert document["schema_version"] == SCHEMA_VERSION == 2
    # Its images have no recipe: they stay stored files (one per name), next to the photo.
    stored = sorted(p.name.rsplit("-", 1)[0] for p in (tmp_path / "images").iterdir())
    assert stored == sorted(["photo", "round2_overlay", "round3_overlay", "round4_overlay"] +
                            [f"round4_mask{k}_{v}" for k in (1, 2, 3) for v in ("view", "zoom")])
    again = load_trace(tmp_path)
    assert again.schema_version == 2 and again.messages == old_run.messages and again.rounds == old_run.rounds
    assert again.final_masks == old_run.final_masks and np.array_equal(np.asarray(again.image),
                                                                       np.asarray(old_run.image))


def test_a_version_1_zip_with_every_kind_of_edit_loads_and_replays():
    trace = load_trace_zip((V1 / "edited_trace.zip").read_bytes())
    assert trace.schema_version == 1
    assert [type(op) for op in trace.edits] == [ToggleMask, BringInMask, RelabelMask, BrushStroke, BrushStroke,
                                                ClickMask, DeleteMask]
    state = EditState.from_trace(trace)
    assert [it.label for it in state.corrected_items()] == ["kid", "the child in front"]
    assert load_trace_zip(trace_to_zip_bytes(trace)).edits == trace.edits


def test_a_version_1_bundle_loads_with_its_corrections():
    bundle = load_bundle((V1 / "bundle.zip").read_bytes())
    assert bundle.trace.schema_version == 1 and len(bundle.trace.edits) == 7
    assert len(bundle.state.corrected_items()) == 2


def _with_fields_of_later_version_1_writers(folder: Path) -> None:
    """Edit a copied version-1 folder the way the version-1 writer of issues 10, 11 and 14 wrote it: a context's
    reasons, a verification that failed (source "error" with its error) and the decoding settings."""
    path = folder / "trace.json"
    document = json.loads(path.read_text())
    document["rounds"][3]["context"]["reasons"] = [[2, "before_latest_segment"], [3, "before_latest_segment"],
                                                   [4, "before_latest_segment"], [5, "before_latest_segment"]]
    failed = document["rounds"][3]["result"]["verdicts"][1]
    failed.update(verdict="accept", source="error", outputs=[], error="the verifier ran out of memory")
    document["settings"]["decoding"] = {"main": {"greedy": False, "temperature": 0.7, "seed": 0,
                                                 "max_new_tokens": 2048}}
    path.write_text(json.dumps(document))


def test_fields_added_to_version_1_survive_its_migration_and_a_save_in_the_current_version(tmp_path):
    import shutil

    shutil.copytree(V1 / "run", tmp_path / "old")
    _with_fields_of_later_version_1_writers(tmp_path / "old")
    old = load_trace(tmp_path / "old")
    reasons = ((2, "before_latest_segment"), (3, "before_latest_segment"), (4, "before_latest_segment"),
               (5, "before_latest_segment"))
    failed = old.rounds[3].result.verdicts[1]
    assert old.rounds[3].context.reasons == reasons and old.rounds[2].context.reasons is None
    # stored as "accept" (as every writer before issue 30 did for a kept, unchecked mask): read as not confirmed
    assert (failed.source, failed.verdict, failed.error) == ("error", "unconfirmed", "the verifier ran out of memory")
    assert old.rounds[3].result.verdicts[0].error is None
    assert old.settings["decoding"]["main"]["temperature"] == 0.7
    save_trace(old, tmp_path / "new")
    document = json.loads((tmp_path / "new" / "trace.json").read_text())
    assert document["rounds"][3]["context"]["reasons"][0] == [2, "before_latest_segment"]
    assert document["rounds"][3]["result"]["verdicts"][1]["error"] == "the verifier ran out of memory"
    again = load_trace(tmp_path / "new")
    assert again.rounds == old.rounds and again.settings == old.settings
    assert again.rounds[3].context.reasons == reasons and again.rounds[3].result.verdicts[1].error == failed.error
