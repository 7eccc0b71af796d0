"""A video trace saves to a folder or a .zip and reads back the same; bad files are refused in words."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import rect_mask
from test_video_corrections import FIX, _editor
from test_video_run import H, W, _frame_segmenter, _run, _select_cup
from test_video_run import _agent as image_agent

from sam3_agent.correct.saved import load_trace
from sam3_agent.errors import TraceFormatError
from sam3_agent.video.run import VideoConfig
from sam3_agent.video.saved import (
    VIDEO_TRACE_FILE,
    is_video_trace,
    load_video_trace,
    load_video_trace_zip,
    save_video_trace,
    video_trace_json,
    video_trace_zip_bytes,
)
from sam3_agent.vlm.scripted import ScriptedVLM


def _edited_trace():
    editor, trace, _ = _editor()
    list(editor.replace(1, 8, rect_mask(H, W, *FIX)))
    list(editor.add(2, rect_mask(H, W, 44, 30, 52, 40)))
    editor.remove(2)
    return trace


def _same(a, b):
    assert video_trace_json(a) == video_trace_json(b)
    assert [k.trace for k in a.keyframes] == [k.trace for k in b.keyframes]
    assert a.edits == b.edits and a.checks == b.checks
    for object_id in a.tracks.object_ids():
        assert a.tracks.objects[object_id].masks == b.tracks.objects[object_id].masks


def test_a_folder_reads_back_the_same_trace(tmp_path):
    trace = _edited_trace()
    path = save_video_trace(trace, tmp_path / "out")
    assert path == tmp_path / "out" / VIDEO_TRACE_FILE
    assert is_video_trace(tmp_path / "out") and is_video_trace(path)
    _same(trace, load_video_trace(tmp_path / "out"))
    _same(trace, load_video_trace(path))


def test_a_zip_reads_back_the_same_trace(tmp_path):
    trace = _edited_trace()
    data = video_trace_zip_bytes(trace)
    _same(trace, load_video_trace_zip(data))
    (tmp_path / "t.zip").write_bytes(data)
    assert is_video_trace(tmp_path / "t.zip")
    _same(trace, load_video_trace(tmp_path / "t.zip"))


def test_newcomer_checks_read_back(tmp_path):
    segmenter = _frame_segmenter([(8, (40, 5, 50, 15), 0.9)])
    agent = image_agent(_select_cup(), segmenter, ScriptedVLM(["<verdict>Accept</verdict>"]))
    run, _, _, _ = _run(agent=agent, config=VideoConfig(newcomers=True))
    save_video_trace(run.trace, tmp_path)
    back = load_video_trace(tmp_path)
    assert back.checks == run.trace.checks and back.checks[0].outcome == "accepted"
    assert back.settings["newcomers"] is True


def test_each_keyframe_folder_is_an_image_trace_of_its_own(tmp_path):
    trace = _edited_trace()
    save_video_trace(trace, tmp_path)
    image_trace = load_trace(tmp_path / "keyframes" / "00004")
    assert image_trace == trace.keyframes[0].trace


def test_undo_still_works_after_reading_back(tmp_path):
    trace = _edited_trace()
    save_video_trace(trace, tmp_path)
    back = load_video_trace(tmp_path)
    from sam3_agent.video.corrections import VideoEditor

    editor = VideoEditor(back)
    editor.undo()  # the removal
    assert back.tracks.object_ids() == [1, 2]
    editor.undo()  # the addition
    editor.undo()  # the fix on frame 8
    run, _, _, _ = _run()
    for frame in range(12):
        assert np.array_equal(back.tracks.mask(1, frame), run.trace.tracks.mask(1, frame)), frame


def test_a_saved_trace_is_replaced_whole(tmp_path):
    first = _edited_trace()
    save_video_trace(first, tmp_path)
    second, _, _, _ = _run(keyframe=6)
    save_video_trace(second.trace, tmp_path)
    back = load_video_trace(tmp_path)
    assert [k.frame_index for k in back.keyframes] == [6] and back.edits == []


def _rewrite(tmp_path, change):
    trace = _edited_trace()
    save_video_trace(trace, tmp_path)
    document = json.loads((tmp_path / VIDEO_TRACE_FILE).read_text())
    change(document)
    (tmp_path / VIDEO_TRACE_FILE).write_text(json.dumps(document))


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.update(kind="other"), "is not a SAM3 Agent video trace"),
    (lambda d: d.update(schema_version=9), "schema version 9"),
    (lambda d: d.pop("query"), "the field 'query' is missing"),
    (lambda d: d["objects"][0]["frames"][0].__setitem__(0, 99), "names frame 99, outside the clip's 12 frames"),
    (lambda d: d["objects"][0]["frames"][0].__setitem__(1, "abc"), "object 1, frame 0"),
    (lambda d: d["objects"][0]["frames"][0].__setitem__(3, "magic"), "unknown mask source 'magic'"),
    (lambda d: d.update(status="odd"), "unknown status 'odd'"),
])
def test_a_malformed_video_trace_is_refused_in_words(tmp_path, change, message):
    _rewrite(tmp_path, change)
    with pytest.raises(TraceFormatError, match=message):
        load_video_trace(tmp_path)


def test_a_missing_or_foreign_file_is_refused_in_words(tmp_path):
    with pytest.raises(TraceFormatError, match="holds no video_trace.json"):
        load_video_trace(tmp_path)
    with pytest.raises(TraceFormatError, match="does not exist"):
        load_video_trace(tmp_path / "nothing.zip")
    (tmp_path / "cut.zip").write_bytes(video_trace_zip_bytes(_edited_trace())[:200])
    with pytest.raises(TraceFormatError):
        load_video_trace(tmp_path / "cut.zip")
    assert not is_video_trace(tmp_path / "cut.zip")
