"""Saving and loading traces: equal after a round trip; malformed files give clear errors."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
from conftest import tool, verdict

from sam3_agent.agent.config import AgentConfig
from sam3_agent.agent.loop import Agent
from sam3_agent.errors import TraceFormatError
from sam3_agent.trace.io import load_trace, load_trace_zip, save_trace, trace_to_zip_bytes
from sam3_agent.vlm.scripted import ScriptedVLM


@pytest.fixture
def full_trace(segmenter, astronaut):
    vlm = ScriptedVLM(
        [
            "no tool here",
            tool("segment_phrase", text_prompt="person"),
            tool("segment_phrase", text_prompt="child"),
            tool("examine_each_mask"),
            tool("select_masks_and_return", final_answer_masks=[1]),
        ],
        name="main",
    )
    verifier = ScriptedVLM([verdict("Accept"), "no verdict", verdict("Reject")], name="verifier")
    return Agent(vlm, segmenter, AgentConfig(), verifier=verifier).run(astronaut, "the child in front")


def test_folder_round_trip_is_equal(full_trace, tmp_path):
    path = save_trace(full_trace, tmp_path / "run")
    loaded = load_trace(path)
    assert loaded == full_trace
    assert loaded.status == "done" and len(loaded.rounds) == 5
    assert np.array_equal(loaded.final_masks.masks, full_trace.final_masks.masks)
    assert loaded.rounds[3].result.verdicts[1].outputs == ("no verdict", verdict("Reject"))


def test_context_reasons_verdict_errors_and_decoding_settings_round_trip(full_trace, tmp_path):
    import dataclasses

    examined = full_trace.rounds[3]
    failed = dataclasses.replace(examined.result.verdicts[0], verdict="unconfirmed", source="error",
                                 error="the verifier timed out")
    result = dataclasses.replace(examined.result, verdicts=(failed, *examined.result.verdicts[1:]))
    full_trace.rounds[3] = dataclasses.replace(examined, result=result)
    full_trace.settings["decoding"] = {"main": {"greedy": True, "seed": 3, "max_new_tokens": 64}}
    assert full_trace.rounds[3].context.reasons  # the agent records why messages were dropped
    loaded = load_trace(save_trace(full_trace, tmp_path / "run"))
    assert loaded == full_trace
    assert [r.context.reasons for r in loaded.rounds] == [r.context.reasons for r in full_trace.rounds]
    assert loaded.rounds[3].result.verdicts[0].error == "the verifier timed out"
    assert loaded.settings["decoding"] == {"main": {"greedy": True, "seed": 3, "max_new_tokens": 64}}


def test_folder_holds_the_photo_the_mask_sets_and_no_rendered_view(full_trace, tmp_path):
    save_trace(full_trace, tmp_path)
    document = json.loads((tmp_path / "trace.json").read_text())
    assert document["schema_version"] == 2 and document["renderer_version"] == 6
    # The photo came from memory (no file): stored losslessly. No overlay, mask or zoom view is stored.
    assert [p.name for p in (tmp_path / "images").iterdir()] == [document["photo"]["file"].split("/")[1]]
    assert document["photo"]["file"].endswith(".png")
    # Mask sets: "person" (3 masks), "child" (2), and the survivors and final answer, which only pick
    # masks of "child": every mask's RLE is stored once.
    sets = [json.loads((tmp_path / f).read_text()) for f in document["mask_files"]]
    assert [len(s.get("rle", [])) for s in sets] == [3, 2, 0]
    assert sets[2]["from"] == document["mask_files"][1] and sets[2]["indices"] == [0]
    assert sorted(p.name for p in (tmp_path / "masks").iterdir()) == sorted(f.split("/")[1] for f in document["mask_files"])
    overlay = document["messages"][7]["parts"][1]
    # the overlay's recipe records the pixel bounds its labels were sized for (here the defaults)
    assert overlay == {"type": "image", "name": "round3_overlay",
                       "view": {"kind": "overlay", "masks": 1, "bounds": [200_704, 1_003_520]}}
    verdict = document["rounds"][3]["result"]["verdicts"][1]
    assert verdict["mask_view"] == {"name": "round4_mask2_view",
                                    "view": {"kind": "locate", "masks": 1, "index": 1, "bounds": [200_704, 1_003_520]}}
    assert verdict["zoom_view"] == {"name": "round4_mask2_zoom",
                                    "view": {"kind": "closeup", "masks": 1, "index": 1, "bounds": [200_704, 1_003_520]}}
    assert "group" not in verdict  # verified alone
    assert document["rounds"][3]["context"]["kept"] == [0, 1, 6, 7]


def test_zip_round_trip_is_equal(full_trace):
    assert load_trace_zip(trace_to_zip_bytes(full_trace)) == full_trace


def test_unfinished_and_failed_traces_round_trip(segmenter, astronaut, tmp_path):
    trace = Agent(ScriptedVLM([tool("segment_phrase", text_prompt="person")]), segmenter).run(astronaut, "x")
    assert trace.status == "failed"
    assert load_trace(save_trace(trace, tmp_path)) == trace


def test_unknown_schema_version_is_refused(full_trace, tmp_path):
    save_trace(full_trace, tmp_path)
    document = json.loads((tmp_path / "trace.json").read_text())
    document["schema_version"] = 99
    (tmp_path / "trace.json").write_text(json.dumps(document))
    with pytest.raises(TraceFormatError, match="schema_version 99"):
        load_trace(tmp_path)


def test_image_name_outside_the_folder_is_refused(full_trace, tmp_path):
    save_trace(full_trace, tmp_path)
    document = json.loads((tmp_path / "trace.json").read_text())
    document["photo"]["file"] = "../../etc/passwd"
    (tmp_path / "trace.json").write_text(json.dumps(document))
    with pytest.raises(TraceFormatError, match="bad file name"):
        load_trace(tmp_path)


def test_missing_field_is_a_clear_error(full_trace, tmp_path):
    save_trace(full_trace, tmp_path)
    document = json.loads((tmp_path / "trace.json").read_text())
    del document["rounds"][0]["output"]
    (tmp_path / "trace.json").write_text(json.dumps(document))
    with pytest.raises(TraceFormatError, match="malformed: the field 'output' is missing") as caught:
        load_trace(tmp_path)
    assert "KeyError" not in str(caught.value)  # no Python class names in what a user reads


@pytest.mark.parametrize(
    ("data", "message"),
    [(b"", "empty"), (b"not a zip at all", "not a .zip"), (b"x" * 2000, "larger than")],
)
def test_bad_zip_files_are_refused(data, message):
    with pytest.raises(TraceFormatError, match=message):
        load_trace_zip(data, max_bytes=1000)


def test_zip_without_trace_json_is_refused():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("hello.txt", "hi")
    with pytest.raises(TraceFormatError, match="no trace.json"):
        load_trace_zip(buffer.getvalue())


def test_saving_into_a_used_folder_removes_the_files_of_the_old_trace(full_trace, segmenter, astronaut, tmp_path):
    save_trace(full_trace, tmp_path)
    short = Agent(ScriptedVLM([tool("report_no_mask")]), segmenter).run(astronaut, "x")
    save_trace(short, tmp_path)
    document = json.loads((tmp_path / "trace.json").read_text())
    assert [f"images/{p.name}" for p in (tmp_path / "images").iterdir()] == [document["photo"]["file"]]
    assert [f"masks/{p.name}" for p in (tmp_path / "masks").iterdir()] == document["mask_files"]  # the empty answer
    assert load_trace(tmp_path) == short


def test_image_name_round_trips_and_old_traces_without_it_load(full_trace, tmp_path):
    full_trace.image_name = "astronaut.jpg"
    save_trace(full_trace, tmp_path / "named")
    assert load_trace(tmp_path / "named").image_name == "astronaut.jpg"
    assert load_trace_zip(trace_to_zip_bytes(full_trace)) == full_trace
    document = json.loads((tmp_path / "named" / "trace.json").read_text())
    del document["image_name"]  # written before the field existed
    (tmp_path / "named" / "trace.json").write_text(json.dumps(document))
    assert load_trace(tmp_path / "named").image_name is None
