"""The Video tab's handlers called as plain functions, on the bundled real clip, with a scripted VLM, a segmenter with
known masks and a tracker double that moves each mask a known step (``video_doubles.ShiftTracker``): opening and
refusing clips, the scrubber, a run streaming (rounds, progress, announcements, the scrubbed frame redrawn as it is
tracked), Stop, the downloads, sessions kept apart and dropped."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import av
import gradio as gr
import numpy as np
import pytest
from conftest import ASSETS, KnownSegmenter, photo, rect_mask, tool
from PIL import Image
from video_doubles import ShiftTracker, shifted

from sam3_agent.presets import Backends
from sam3_agent.rle import decode_rle
from sam3_agent.ui.memory_size import held_bytes
from sam3_agent.ui.run.handlers import Handlers
from sam3_agent.ui.run.runner import AgentFactory
from sam3_agent.ui.settings import AppSettings
from sam3_agent.ui.video.handlers import VideoHandlers
from sam3_agent.video.clip import open_clip
from sam3_agent.video.export import draw_objects
from sam3_agent.video.saved import load_video_trace_zip
from sam3_agent.vlm.scripted import ScriptedVLM

CLIP = ASSETS / "bigbuckbunny.mp4"  # 50 frames, 480x270, 25 fps
RABBIT = (100, 40, 220, 200)  # xyxy px: the box the segmenter double gives "rabbit" (a rectangle mask)
STONE = (300, 150, 360, 200)
KEYFRAME = 10
SCRIPT = {
    "main": [tool("segment_phrase", "the rabbit first", text_prompt="rabbit"),
             tool("select_masks_and_return", "mask 1 is the rabbit", final_answer_masks=[1])],
    "verify": [],
}
QUERY = "the rabbit stretching"
SKIP = gr.skip()


def skipped(value) -> bool:
    """Whether a component value is Gradio's "no change"."""
    return value == SKIP


def rabbit_on(frame: int, keyframe: int = KEYFRAME) -> np.ndarray:
    """The rabbit's mask on ``frame`` as the tracker double gives it: the keyframe's rectangle moved 2 px a frame."""
    return shifted(rect_mask(270, 480, *RABBIT), 2 * (frame - keyframe), 0)


def make_handlers(tmp_path: Path, tracker=None, max_image_pixels: int | None = None,
                  messages: list[str] | None = None) -> tuple[Handlers, ShiftTracker]:
    settings = AppSettings(max_rounds=5, **({"max_image_pixels": max_image_pixels} if max_image_pixels else {}))
    idle = ScriptedVLM([])
    segmenter = KnownSegmenter({"rabbit": [(RABBIT, 0.9), (STONE, 0.7)]})
    tracker = tracker or ShiftTracker()
    factory = AgentFactory(settings, Backends(idle, idle, segmenter, {"vlm_model": "scripted"}), SCRIPT,
                           video_tracker=tracker)
    sink = messages if messages is not None else []
    return Handlers(factory, warn=sink.append, root=tmp_path / "app"), tracker


def status_words(html: str) -> str:
    from html import unescape

    return unescape(html.split(">", 1)[1].rsplit("</div>", 1)[0])


def opened(video: VideoHandlers, path: Path = CLIP, owner: str = "tab-a") -> str:
    import types

    page = video.open(str(path), None, types.SimpleNamespace(session_hash=owner))
    assert isinstance(page.key, str), status_words(page.status)
    return page.key


def finished(video: VideoHandlers, key: str, keyframe: int = KEYFRAME) -> list:
    pages = list(video.run(key, QUERY, keyframe, 5, 0.5))
    assert "Done" in status_words(pages[-1].status), status_words(pages[-1].status)
    return pages


@pytest.fixture
def app(tmp_path):
    handlers, tracker = make_handlers(tmp_path)
    yield handlers.video, tracker
    handlers.close()


# ------------------------------------------------------------------ opening a clip


def test_an_uploaded_clip_opens_on_its_first_frame_with_its_facts(app):
    video, _ = app
    page = video.open(str(CLIP), None)
    assert status_words(page.status) == ("Clip ready: bigbuckbunny.mp4, 50 frames of 480x270, 25 fps, 2.0 s. Pick the "
                                         "keyframe with the slider (the agent reasons on it), add a query, then press "
                                         "Run.")
    assert page.slider["maximum"] == 49 and page.slider["value"] == 0 and page.slider["interactive"] is True
    with open_clip(CLIP) as clip:
        assert np.array_equal(np.asarray(page.frame), np.asarray(clip.frame(0)))
    assert page.caption == "Frame 0 of 0-49 · 0.00 s"
    assert page.result == {"__type__": "update", "visible": False}
    assert page.gpu_note == ""  # not on ZeroGPU


@pytest.mark.parametrize("name, content, words", [
    ("notes.mp4", b"plain text, not a clip", "'notes.mp4'"),
    ("empty.mp4", b"", "'empty.mp4' is empty (0 bytes)"),
])
def test_a_file_that_is_no_clip_is_refused_in_words_and_nothing_is_kept(app, tmp_path, name, content, words):
    video, _ = app
    path = tmp_path / name
    path.write_bytes(content)
    page = video.open(str(path), None)
    text = status_words(page.status)
    assert page.key is None and words in text and text.endswith("Upload another clip.")
    assert "/tmp" not in text and "Error" not in text
    assert video.sessions.info() == (0, 0)
    assert not any((video.root / "video").iterdir())  # the kept copy went with it


def test_a_clip_over_the_frame_size_cap_is_refused_from_what_it_declares(tmp_path):
    handlers, _ = make_handlers(tmp_path, max_image_pixels=100_000)
    page = handlers.video.open(str(CLIP), None)
    assert status_words(page.status) == (
        "'bigbuckbunny.mp4' declares frames of 480x270 = 129,600 pixels, above the 100,000 per frame accepted here; "
        "downscale it. Upload another clip.")


def test_a_new_clip_replaces_the_tabs_previous_one(app):
    video, _ = app
    first = opened(video)
    session = video.sessions.get(first)
    second = video.open(str(CLIP), first).key
    assert second != first and video.sessions.info()[0] == 1
    assert not session.folder.exists()
    with pytest.raises(RuntimeError, match="closed"):
        session.clip.frame(0)


def test_an_emptied_upload_box_clears_the_tab(app):
    video, _ = app
    key = opened(video)
    page = video.open(None, key)
    assert page.key is None and page.frame is None and video.sessions.info() == (0, 0)
    assert "Upload a clip" in status_words(page.status)


# ------------------------------------------------------------------ the scrubber


def test_the_scrubber_shows_the_frame_and_its_time(app):
    video, _ = app
    key = opened(video)
    image, caption = video.scrub(key, 12)
    with open_clip(CLIP) as clip:
        assert np.array_equal(np.asarray(image), np.asarray(clip.frame(12)))
    assert caption == "Frame 12 of 0-49 · 0.48 s"
    assert video.scrub(key, 50) == (SKIP, SKIP)  # outside the clip: nothing changes
    assert video.scrub("no-such-key", 3) == (SKIP, SKIP)


def test_a_tabs_clip_holds_at_most_the_frames_its_scrubber_shows(app):
    video, _ = app
    key = opened(video)
    for frame in (5, 40, 12, 33, 0, 49):
        video.scrub(key, frame)
    assert held_bytes(video.sessions.get(key)) == 2 * 480 * 270 * 4  # two frames as Pillow holds RGB (4 a pixel)
    finished(video, key)  # a result adds its masks as RLE and the keyframe's photo, and the store counts it
    sessions, held = video.sessions.info()
    assert sessions == 1 and held == held_bytes(video.sessions.get(key)) < 3 * 480 * 270 * 4 + 200_000


# ------------------------------------------------------------------ a run


def test_a_run_streams_the_keyframes_rounds_then_tracks_every_frame_exactly(app):
    video, tracker = app
    key = opened(video)
    pages = finished(video, key)
    assert pages[0].slider == {"__type__": "update", "value": KEYFRAME}
    rounds_shown = [p.rounds for p in pages if not skipped(p.rounds) and p.rounds]
    assert 'data-round="1"' in rounds_shown[0] and 'data-round="2"' in rounds_shown[-1]
    assert "select_masks_and_return" in pages[-1].rounds
    last = pages[-1]
    assert status_words(last.status) == "Done: 1 object over 50 frames (keyframe 10, 2 rounds, 49 frames tracked)."
    assert last.result == {"__type__": "update", "visible": True}
    assert 'data-object="1"' in last.table and "<td>0</td><td>49</td><td>50</td>" in last.table
    assert last.shown["choices"] == [("1: " + QUERY, 1)] and last.shown["value"] == [1]
    # forward from the keyframe to the end, backward to the start: each frame the prompt moved 2 px a frame
    assert tracker.calls == [(10, (1,), False, 39), (10, (1,), True, 10)]
    tracks = video.sessions.get(key).trace.tracks
    for frame in range(50):
        assert np.array_equal(tracks.mask(1, frame), rabbit_on(frame)), frame
    assert 'data-done="49" data-total="49"' in last.progress


def test_the_scrubbed_frame_shows_its_masks_as_soon_as_it_is_tracked(app):
    video, _ = app
    key = opened(video)
    run = video.run(key, QUERY, KEYFRAME, 5, 0.5)
    pages = []
    for page in run:
        pages.append(page)
        if len(pages) == 1:
            video.scrub(key, 30)  # the person moves the slider while the agent reasons
    redrawn = [p.frame for p in pages[1:] if not skipped(p.frame)]
    with open_clip(CLIP) as clip:
        frame = clip.frame(30)
    expected = draw_objects(frame, {1: video.sessions.get(key).trace.tracks.present(1, 30)})
    assert np.array_equal(np.asarray(redrawn[0]), np.asarray(expected))  # the first redraw: frame 30 tracked


def test_progress_is_announced_at_quarters_not_frame_by_frame(app):
    video, _ = app
    key = opened(video)
    said = [p.announce for p in finished(video, key) if not skipped(p.announce)]
    heads = [text.split(", about")[0].rstrip(".") for text in said]
    assert heads[:-1] == ["Tracking: 0 % done, 0 of 49 frames", "Tracking: 27 % done, 13 of 49 frames",
                     "Tracking: 51 % done, 25 of 49 frames", "Tracking: 76 % done, 37 of 49 frames",
                     "Tracking: 100 % done, 49 of 49 frames"]
    assert said[-1].startswith("Tracking: 49 of 49 frames, done at ")


def test_stop_while_tracking_keeps_every_frame_tracked(app):
    video, tracker = app
    key = opened(video)
    run = video.run(key, QUERY, KEYFRAME, 5, 0.5)
    pages = []
    for page in run:
        pages.append(page)
        if not skipped(page.progress) and 'data-done="' in (page.progress or "") and 'data-done="0"' not in page.progress:
            break
    stop = video.stop(key)
    assert status_words(next(stop)).startswith("Stopping: tracking ends after the frame in progress")
    pages += list(run)
    list(stop)
    trace = video.sessions.get(key).trace
    tracked = int(trace.timings["frames_tracked"])
    assert trace.status == "cancelled" and 0 < tracked < 49
    assert status_words(pages[-1].status) == (f"Stopped: 1 object, {tracked} frames tracked; every frame tracked "
                                              "until then is kept.")
    present = [f for f in range(50) if trace.tracks.present(1, f) is not None]
    assert present == list(range(KEYFRAME, KEYFRAME + tracked + 1))  # the keyframe and the frames after it, exactly
    for frame in present:
        assert np.array_equal(trace.tracks.mask(1, frame), rabbit_on(frame))
    assert not video.sessions.get(key).busy


def test_a_run_closed_early_is_stopped_and_lets_the_session_go(app):
    video, _ = app
    key = opened(video)
    run = video.run(key, QUERY, KEYFRAME, 5, 0.5)
    next(run)
    run.close()  # the tab's event cancelled
    session = video.sessions.get(key)
    assert session.trace.status == "cancelled" and not session.busy


@pytest.mark.parametrize("query, frame, words", [
    ("   ", 0, "the query is empty"),
    (QUERY, 50, "frame 50 is not in the clip: its frames are numbered 0 to 49"),
    (QUERY, 2.5, "frame 2.5 is not in the clip"),
])
def test_bad_input_to_run_is_said_in_the_status_line(app, query, frame, words):
    video, _ = app
    key = opened(video)
    pages = list(video.run(key, query, frame, 5, 0.5))
    assert len(pages) == 1 and words in status_words(pages[0].status).lower()
    assert video.sessions.get(key).trace is None


def test_run_without_a_clip_or_without_a_tracker_says_why(tmp_path):
    handlers, _ = make_handlers(tmp_path)
    pages = list(handlers.video.run(None, QUERY, 0, 5, 0.5))
    assert status_words(pages[0].status) == "Upload a clip first (or pick the example)."
    handlers.factory.video_tracker, handlers.factory.video_error = None, "SAM 3's video tracker was not found"
    key = opened(handlers.video)
    pages = list(handlers.video.run(key, QUERY, 0, 5, 0.5))
    assert status_words(pages[0].status) == "SAM 3's video tracker was not found."


def test_the_context_of_any_keyframe_round_opens(app):
    import types

    video, _ = app
    key = opened(video)
    finished(video, key)
    first = video.context(key, types.SimpleNamespace(index=1))
    assert "Context of round 1</b> (latest: round 2)" in first
    assert "Context of round 2</b>" in video.context(key, types.SimpleNamespace(index=2))


# ------------------------------------------------------------------ downloads


def test_the_downloads_hold_one_frame_per_clip_frame_in_every_file(app):
    video, _ = app
    key = opened(video)
    finished(video, key)
    pages = list(video.downloads(key))
    status, progress, _announce, overlay, files = pages[-1]
    assert status_words(status).endswith("Downloads ready.") and 'data-done="50" data-total="50"' in progress
    names = [Path(p).name for p in files]
    assert names == ["masks_palette_png.zip", "tracks_ytvis.json", "video_trace.zip", "overlay.mp4"]
    assert overlay == files[-1]
    palette, ytvis, zipped, mp4 = (Path(p) for p in files)
    with zipfile.ZipFile(palette) as archive:
        pngs = sorted(archive.namelist())
        assert pngs == [f"masks/{i:05d}.png" for i in range(50)]
        ids = np.asarray(Image.open(archive.open("masks/00020.png")))
    assert np.array_equal(ids == 1, rabbit_on(20)) and set(np.unique(ids)) == {0, 1}
    document = json.loads(ytvis.read_text())
    assert document["videos"][0]["length"] == 50
    segmentations = document["annotations"][0]["segmentations"]
    assert len(segmentations) == 50 and np.array_equal(decode_rle([segmentations[33]])[0], rabbit_on(33))
    trace = load_video_trace_zip(zipped)
    assert trace.clip.frame_count == 50 and trace.status == "done" and trace.query == QUERY
    with av.open(str(mp4)) as container:
        assert sum(1 for _ in container.decode(video=0)) == 50


def test_downloads_of_a_result_superseded_by_an_edit_are_not_offered(app):
    video, _ = app
    key = opened(video)
    finished(video, key)
    downloads = video.downloads(key)
    first = next(downloads)  # the quick files are written, the overlay video goes on
    video.remove(key, 1)
    rest = [first, *downloads]
    assert all(skipped(page[4]) for page in rest)


# ------------------------------------------------------------------ sessions


def test_two_tabs_clips_never_mix(app, tmp_path):
    video, _ = app
    frames = tmp_path / "cat_frames.zip"
    with zipfile.ZipFile(frames, "w") as archive:
        for index, name in enumerate(("chelsea.jpg", "coffee.jpg", "chelsea.jpg")):
            image = photo(name).resize((320, 240))
            data = image.tobytes()
            Image.frombytes("RGB", (320, 240), data).save(tmp_path / f"{index}.png")
            archive.write(tmp_path / f"{index}.png", f"frames/{index:03d}.png")
    a, b = opened(video, CLIP, "tab-a"), opened(video, frames, "tab-b")
    finished(video, a)
    image_b, caption_b = video.scrub(b, 1)
    assert np.array_equal(np.asarray(image_b), np.asarray(photo("coffee.jpg").resize((320, 240))))
    assert caption_b == "Frame 1 of 0-2"  # frames without a rate: numbers, no time
    assert video.sessions.get(b).trace is None and video.sessions.get(a).trace.clip.frame_count == 50
    image_a, _ = video.scrub(a, 1)
    assert image_a.size == (480, 270)


def test_a_closed_tab_drops_its_clips_and_their_files(app):
    import types

    video, _ = app
    key = opened(video, owner="tab-a")
    other = opened(video, owner="tab-b")
    folder = video.sessions.get(key).folder
    video.unload(types.SimpleNamespace(session_hash="tab-a"))
    assert not folder.exists() and video.sessions.info()[0] == 1
    assert video.sessions.get(other) is not None
    with pytest.raises(Exception, match="no longer open"):
        video.sessions.get(key)
