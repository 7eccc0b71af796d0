"""Exports of a clip's objects: palette PNGs (pixel = object id), a YouTube-VIS JSON pycocotools decodes to the
trace's masks, and an overlay video with one frame per clip frame at the clip's times."""

from __future__ import annotations

import io
import json
import zipfile

import av
import numpy as np
from conftest import rect_mask
from PIL import Image
from pycocotools import mask as coco_mask
from test_video_corrections import _editor
from test_video_run import H, W, _run

from sam3_agent.video.export import (
    OBJECT_COLORS,
    draw_objects,
    id_map,
    palette_zip_bytes,
    write_overlay_video,
    write_palette_pngs,
    write_ytvis,
    ytvis_document,
)


def _two_objects():
    editor, trace, _ = _editor()
    list(editor.add(2, rect_mask(H, W, 12, 12, 16, 16)))  # inside the cup's box on frame 2: overlaps object 1
    return trace, editor.clip


def test_palette_pngs_hold_object_ids_with_the_smaller_object_on_top(tmp_path):
    trace, _ = _two_objects()
    paths = write_palette_pngs(trace.tracks, tmp_path / "masks")
    assert [p.name for p in paths] == [f"{f:05d}.png" for f in range(12)]
    image = Image.open(paths[2])
    assert image.mode == "P" and image.size == (W, H)
    pixels = np.asarray(image)
    cup = trace.tracks.mask(1, 2)
    small = trace.tracks.mask(2, 2)
    assert np.all(pixels[small] == 2) and np.all(pixels[cup & ~small] == 1) and np.all(pixels[~cup & ~small] == 0)
    assert image.getpalette()[3:6] == OBJECT_COLORS[0].tolist() and image.getpalette()[:3] == [0, 0, 0]


def test_the_palette_zip_holds_one_png_per_frame():
    trace, _ = _two_objects()
    with zipfile.ZipFile(io.BytesIO(palette_zip_bytes(trace.tracks))) as archive:
        names = archive.namelist()
        assert names == [f"masks/{f:05d}.png" for f in range(12)]
        assert np.array_equal(np.asarray(Image.open(archive.open(names[7]))), id_map(trace.tracks, 7))


def test_the_ytvis_json_decodes_to_the_traces_masks(tmp_path):
    trace, _ = _two_objects()
    path = write_ytvis(trace, tmp_path / "tracks.json")
    document = json.loads(path.read_text())
    assert document == ytvis_document(trace)
    video = document["videos"][0]
    assert (video["length"], video["width"], video["height"]) == (12, W, H)
    assert video["file_names"][3] == "coffee/00003.png" and video["timestamps"][3] == 0.12
    assert document["categories"] == [{"id": 1, "name": "the cup"}]
    for annotation in document["annotations"]:
        object_id = annotation["id"]
        assert len(annotation["segmentations"]) == 12
        for frame, segmentation in enumerate(annotation["segmentations"]):
            expected = trace.tracks.mask(object_id, frame)
            if segmentation is None:
                assert not expected.any()
                continue
            decoded = coco_mask.decode({"size": segmentation["size"], "counts": segmentation["counts"].encode()})
            assert np.array_equal(decoded.astype(bool), expected)
            assert annotation["areas"][frame] == int(expected.sum())
            ys, xs = np.nonzero(expected)
            assert annotation["bboxes"][frame] == [xs.min(), ys.min(), xs.max() + 1 - xs.min(), ys.max() + 1 - ys.min()]


def test_an_object_absent_from_a_frame_is_null_there():
    run, _, _, _ = _run()
    annotation = ytvis_document(run.trace)["annotations"][0]
    # the tracker double pushes the cup out of the 64 px frame after 54 px: never here; frame 0 is 8 px left
    assert all(s is not None for s in annotation["segmentations"])
    run.trace.tracks.set_mask(1, 3, None)
    assert ytvis_document(run.trace)["annotations"][0]["segmentations"][3] is None


def test_the_overlay_video_has_one_frame_per_clip_frame_at_the_clips_times(tmp_path):
    trace, clip = _two_objects()
    done = []
    path = write_overlay_video(trace, clip, tmp_path / "overlay.mp4", on_frame=done.append)
    assert done == list(range(12)) and not list(tmp_path.glob(".*partial"))
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.name == "h264" and (stream.width, stream.height) == (W, H)
        frames = list(container.decode(stream))
    assert len(frames) == 12
    assert [round(float(f.pts * f.time_base), 3) for f in frames] == [round(t, 3) for t in trace.clip.timestamps]
    # object 1's colour shows inside its mask on frame 6
    drawn = np.asarray(frames[6].to_image()).astype(int)
    inside = trace.tracks.mask(1, 6)
    plain = np.asarray(clip.frame(6)).astype(int)
    assert np.abs(drawn[inside] - plain[inside]).mean() > 20


def test_draw_objects_numbers_each_object_by_its_id_in_its_colour():
    trace, clip = _two_objects()
    drawn = np.asarray(draw_objects(clip.frame(2), trace.tracks.masks_on(2))).astype(int)
    plain = np.asarray(clip.frame(2)).astype(int)
    assert not np.array_equal(drawn, plain)
    assert np.array_equal(np.asarray(draw_objects(clip.frame(2), {})), plain)
