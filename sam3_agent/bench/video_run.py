"""One case of the video benchmark in this process: ``python -m sam3_agent.bench.video_run MODE RECIPE FRAMES ...``.

Prints one JSON line: frames, seconds, frames per second, peak resident memory (``ru_maxrss`` of this process, so
each case runs in a fresh one; see ``bench.video``) and the vision backbone's passes (forward calls of every
``Sam3ViTModel`` loaded). The cases:

- ``keyframe plain``: transformers' documented recipe for the mask-prompt tracker (``Sam3TrackerVideoModel``): the
  whole clip into ``init_video_session(video=...)``, the mask prompts on frame 0, ``propagate_in_video_iterator``,
  each frame's masks post-processed to the frame's size and kept (bool), every output kept in the session.
- ``keyframe ours``: ``Sam3VideoTracker`` sharing its backbone with the detector (as the product builds them), frames
  pulled one at a time, each frame's masks encoded as RLE and kept (as ``video.tracks`` keeps them).
- ``keyframe own``: the same with the tracker's own backbone (not shared): the cost of sharing, which runs the
  detector's FPN neck on each frame too (it caches the frame's encoding for the detector).
- ``newcomer plain``: the two models loaded apart, as transformers' documentation shows them: ``Sam3VideoModel``
  (the text prompt: detector on every frame and its own tracking of what it finds) over the whole clip, every
  frame's post-processed output kept, plus the keyframe plain recipe for the mask prompts.
- ``newcomer ours``: per frame, the detector with the text prompt (``Sam3Segmenter.segment``: its masks as RLE,
  kept) and ``Sam3VideoTracker`` on the same frame, sharing the frame's one encoding.

Models: the tiny random-weight builds (``tiny.tracker_video``, ``tiny.sam3``; loaded through ``from_pretrained``),
on the CPU in float32, 2 objects prompted on frame 0. Frames: a real clip's frames at a fixed size, looped.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from ..presets import cache_dir
from ..rle import encode
from ..sam.segmenter import Sam3Segmenter
from ..sam.video_tracker import Sam3VideoTracker
from ..tiny.sam3 import build_tiny_sam3
from ..tiny.tracker_video import build_tiny_sam3_tracker_video, build_tiny_sam3_video

PHRASE = "bunny"  # the newcomer mode's text prompt (random weights: any phrase gives detections)
OBJECT_IDS = (1, 2)
MODES = ("keyframe", "newcomer")
RECIPES = ("plain", "ours", "own")
WARM_UP_FRAMES = 5  # tracked once in each case's process before the timed run


def clip_frames(clip: Path, width: int, height: int, most: int) -> list[Image.Image]:
    """At most ``most`` of the clip's frames from its start, RGB, resized to ``width`` x ``height`` (PyAV)."""
    import av

    frames: list[Image.Image] = []
    with av.open(str(clip)) as container:
        for frame in container.decode(video=0):
            frames.append(frame.to_image().convert("RGB").resize((width, height), Image.Resampling.BILINEAR))
            if len(frames) == most:
                break
    if not frames:
        raise ValueError(f"{clip} has no video frame")
    return frames


def prompts(width: int, height: int) -> dict[int, np.ndarray]:
    """Two boxes on frame 0: the centre half of the frame, and a small box at its top right."""
    first = np.zeros((height, width), dtype=bool)
    first[height // 4: 3 * height // 4, width // 4: 3 * width // 4] = True
    second = np.zeros((height, width), dtype=bool)
    second[height // 16: height // 4, 3 * width // 4: 15 * width // 16] = True
    return dict(zip(OBJECT_IDS, (first, second)))


def rss_mb() -> float:
    """Peak resident memory of this process so far, MB (``ru_maxrss``: kilobytes on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _plain_tracker(folder: Path, frames: list[Image.Image], masks: dict[int, np.ndarray]) -> tuple[Any, list[Any]]:
    from transformers import Sam3TrackerVideoModel, Sam3TrackerVideoProcessor

    model = Sam3TrackerVideoModel.from_pretrained(str(folder)).eval()
    processor = Sam3TrackerVideoProcessor.from_pretrained(str(folder))
    height, width = masks[OBJECT_IDS[0]].shape

    def run(warm_up: bool = False) -> tuple[Any, dict[int, Any]]:
        session = processor.init_video_session(video=frames[:WARM_UP_FRAMES] if warm_up else frames,
                                               inference_device="cpu", dtype=torch.float32)
        processor.add_inputs_to_inference_session(session, frame_idx=0, obj_ids=list(OBJECT_IDS),
                                                  input_masks=[masks[i] for i in OBJECT_IDS])
        kept = {}
        for output in model.propagate_in_video_iterator(session, start_frame_idx=0):
            kept[output.frame_idx] = processor.post_process_masks([output.pred_masks], [[height, width]])[0]
        return session, kept

    return run, [model]


def _plain_video_model(folder: Path, frames: list[Image.Image]) -> tuple[Any, list[Any]]:
    from transformers import Sam3VideoModel, Sam3VideoProcessor

    model = Sam3VideoModel.from_pretrained(str(folder)).eval()
    processor = Sam3VideoProcessor.from_pretrained(str(folder))

    def run(warm_up: bool = False) -> tuple[Any, dict[int, Any]]:
        session = processor.init_video_session(video=frames[:WARM_UP_FRAMES] if warm_up else frames,
                                               inference_device="cpu", processing_device="cpu",
                                               video_storage_device="cpu", dtype=torch.float32)
        session = processor.add_text_prompt(inference_session=session, text=PHRASE)
        kept = {}
        for output in model.propagate_in_video_iterator(inference_session=session):
            kept[output.frame_idx] = processor.postprocess_outputs(session, output)
        return session, kept

    return run, [model]


def _ours(sam3_folder: Path, tracker_folder: Path, looped: list[Image.Image], count: int,
          masks: dict[int, np.ndarray], detect: bool, share: bool = True) -> tuple[Any, list[Any]]:
    segmenter = Sam3Segmenter.from_pretrained(str(sam3_folder), device="cpu")
    tracker = Sam3VideoTracker.from_pretrained(str(tracker_folder), device="cpu")
    if share and not tracker.share_backbone_with(segmenter):
        raise RuntimeError("the tiny tracker did not share the detector's backbone")
    height, width = masks[OBJECT_IDS[0]].shape

    def run(warm_up: bool = False) -> tuple[dict[int, Any], dict[int, Any]]:
        detected: dict[int, Any] = {}
        frames = min(WARM_UP_FRAMES, count) if warm_up else count
        segmenter.clear_cache()  # every run starts with no frame encoded

        def source() -> Iterator[tuple[int, Image.Image]]:
            for index in range(frames):
                frame = looped[index % len(looped)]
                if detect:  # the detector first: the tracker then reuses the frame's encoding
                    detected[index] = segmenter.segment(frame, PHRASE)
                yield index, frame

        tracked = {}
        for item in tracker.track(source(), masks, num_frames=frames):
            tracked[item.frame_index] = {i: encode([m], height, width)[0] for i, m in item.masks.items()}
        return tracked, detected

    return run, [segmenter._model, tracker._model]


def measure_case(mode: str, recipe: str, count: int, clip: Path, width: int, height: int) -> dict[str, Any]:
    """Run one case (module docstring) on ``count`` frames; returns its measurements."""
    torch.manual_seed(0)
    root = cache_dir() / "tiny"
    looped = clip_frames(clip, width, height, min(count, 1000))
    masks = prompts(width, height)
    if recipe == "plain":
        frames = [looped[i % len(looped)] for i in range(count)]  # references: the clip is "loaded whole"
        if mode == "keyframe":
            built = [_plain_tracker(build_tiny_sam3_tracker_video(root / "sam3_tracker_video"), frames, masks)]
        else:
            video_folder = build_tiny_sam3_video(root / "sam3_video")
            built = [_plain_video_model(video_folder, frames), _plain_tracker(video_folder, frames, masks)]
    elif mode == "keyframe":
        folders = build_tiny_sam3(root / "sam3"), build_tiny_sam3_tracker_video(root / "sam3_tracker_video")
        built = [_ours(*folders, looped, count, masks, detect=False, share=recipe == "ours")]
    elif recipe == "ours":
        folders = (build_tiny_sam3_video(root / "sam3_video"),) * 2  # one facebook/sam3-like checkpoint for both
        built = [_ours(*folders, looped, count, masks, detect=True)]
    else:
        raise ValueError(f"no case {mode} {recipe}")
    for run, _ in built:
        run(warm_up=True)  # first calls of a fresh process (lazy imports, kernel choices) are not timed
    passes = _count_backbone_passes([model for _, models in built for model in models])
    baseline = rss_mb()
    start = time.perf_counter()
    kept = [run() for run, _ in built]  # everything each recipe returns stays alive until measured
    seconds = time.perf_counter() - start
    peak = rss_mb()
    del kept
    return {"mode": mode, "recipe": recipe, "frames": count, "seconds": round(seconds, 3),
            "frames_per_second": round(count / seconds, 2), "peak_rss_mb": round(peak, 1),
            "baseline_rss_mb": round(baseline, 1), "backbone_passes": len(passes)}


def _count_backbone_passes(models: list[Any]) -> list[int]:
    """A list that grows by one at each forward call of a vision backbone (``Sam3ViTModel``) of ``models``, each
    backbone module counted once however many models hold it."""
    from transformers.models.sam3.modeling_sam3 import Sam3ViTModel

    calls: list[int] = []
    backbones = {id(m): m for model in models for m in model.modules() if isinstance(m, Sam3ViTModel)}
    for backbone in backbones.values():
        backbone.register_forward_hook(lambda *args: calls.append(1))
    return calls


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sam3_agent.bench.video_run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("recipe", choices=RECIPES)
    parser.add_argument("frames", type=int)
    parser.add_argument("--clip", type=Path, required=True)
    parser.add_argument("--width", type=int, required=True)
    parser.add_argument("--height", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = measure_case(args.mode, args.recipe, args.frames, args.clip, args.width, args.height)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
