"""The steps ``batch`` and both kinds of ``eval`` share: flags checked into settings before any model loads, the
items run (locally or on Ray, resumable), the outcome printed, the exit status (``cli.datasets``, ``cli.eval_video``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from ..errors import EXIT_BACKEND, EXIT_INPUT, EXIT_OK, EXIT_STOPPED

DEFAULT_WORST = 8


def prepare_batch(items: Sequence, args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
    """The backend settings, the agent config, the layout of the output folder and the video options, from the flags
    checked before any model loads, and every clip checked within its caps (``clip_checks``). The folder is checked
    (``trace.out_folder.check_out_folder``) but not made: ``layout.prepare()`` makes it once the models are ready, so
    a refused batch leaves the disk as it was.

    Raises:
        InputError: out-of-range or ignored flags, an unreadable script, an output folder that cannot be written, or
            clips refused (one message names each item).
    """
    from ..datasets.batch.clip_checks import check_clips
    from ..datasets.batch.layout import BatchLayout
    from ..datasets.batch.video_runner import VideoOptions
    from ..errors import InputError
    from ..trace.out_folder import check_out_folder
    from .flags import agent_config, backend_settings, clip_caps, video_config

    settings = backend_settings(args)  # checked: out-of-range or ignored flags are refused before any load
    if args.concurrency < 1:
        raise InputError(f"--concurrency must be at least 1, got {args.concurrency}")
    if args.ray_workers is not None and args.ray_workers < 1:
        raise InputError(f"--ray-workers must be at least 1, got {args.ray_workers}")
    config = agent_config(args)
    video = VideoOptions(config=video_config(args), caps=clip_caps(args), overlay_video=args.overlay_video)
    layout = BatchLayout(args.out, items)
    check_out_folder(args.out)
    check_clips(items, video.caps)
    return settings, config, layout, video


def run_on_ray(items: Sequence, layout: Any, settings: Any, config: Any, video: Any, args: argparse.Namespace,
                stdout: TextIO, progress: TextIO | None) -> Any:
    """Run the batch on Ray workers, each loading its own models; returns the ``BatchResult``."""
    from ..datasets.batch.ray_runner import run_batch_on_ray

    where = f" at {args.ray}" if args.ray else ""
    stdout.write(f"Starting Ray{where} and loading the models on its workers...\n")
    stdout.flush()
    return run_batch_on_ray(items, layout, settings, config, address=args.ray or None, workers=args.ray_workers,
                            concurrency=args.concurrency, max_image_pixels=args.max_image_pixels, progress=progress,
                            video=video)


def run_locally(items: Sequence, layout: Any, settings: Any, config: Any, video: Any, args: argparse.Namespace,
                 stdout: TextIO, progress: TextIO | None) -> Any:
    """Load the models here (the video tracker too when there are video items), run the batch over them and close
    them; returns the ``BatchResult``."""
    from ..datasets.batch.agents import BatchAgents
    from ..datasets.batch.items import VideoItem
    from ..datasets.batch.runner import run_batch
    from .flags import with_planned_batch

    stdout.write("Loading models...\n")
    stdout.flush()
    loaded = time.perf_counter()
    agents = BatchAgents.load(settings, config, concurrency=args.concurrency,
                              video=any(isinstance(item, VideoItem) for item in items))
    agents.config = with_planned_batch(config, args, agents.backends.settings)  # smaller on a small GPU
    stdout.write(f"Models ready in {time.perf_counter() - loaded:.1f} s\n")
    stdout.flush()
    try:
        layout.prepare()  # the batch starts: now its folder may be made
        return run_batch(items, layout, agents, concurrency=args.concurrency, max_image_pixels=args.max_image_pixels,
                         progress=progress, video=video)
    finally:
        agents.close()


def run_batch(
    items: Sequence, args: argparse.Namespace, stdout: TextIO, stderr: TextIO
) -> tuple[Any, Any, int | None]:
    """Check the output folder, load the models (locally or on Ray workers), make the folder and run the batch; when
    every item is finished already, load nothing and only rewrite the dataset files.

    Returns:
        ``(layout, result, None)``, or ``(layout or None, None, exit status)`` when it could not run.
    """
    from ..datasets.batch.runner import BatchProgress, unfinished_items
    from ..errors import BackendError, InputError

    progress = stderr if args.progress else None
    try:
        settings, config, layout, video = prepare_batch(items, args)
    except InputError as error:
        stderr.write(f"error: {error}\n")
        return None, None, EXIT_INPUT
    if args.preset == "tiny":
        stdout.write("Note: the tiny preset's models have random weights; their masks and text mean nothing.\n")
    run = run_on_ray if args.ray is not None else run_locally
    try:
        if not unfinished_items(items, layout.read_records(items)):
            stdout.write(f"Nothing to run: all {len(items)} item(s) in {args.out} are already finished, so no model "
                         "is loaded.\n")
            layout.prepare()  # the folder holds the finished batch: only its leftover temporary files go
            return layout, BatchProgress(layout, items, None).close(stopped=False), None  # dataset files rewritten
        result = run(items, layout, settings, config, video, args, stdout, progress)
    except InputError as error:
        stderr.write(f"error: {error}\n")
        return layout, None, EXIT_INPUT
    except BackendError as error:
        stderr.write(f"error: {error}\n")
        return layout, None, EXIT_BACKEND
    except OSError as error:
        stderr.write(f"error: could not write the outputs to {args.out}: {error.strerror or error}\n")
        return layout, None, EXIT_INPUT
    return layout, result, None


def report_batch(result: Any, out: str, stdout: TextIO, notes: bool = True) -> None:
    summary = result.summary
    statuses = ", ".join(f"{k} {v}" for k, v in summary["statuses"].items())
    rate = f", {result.items_per_minute:.1f} items/min" if result.ran else ""
    stdout.write(f"Batch: {summary['items']} item(s): {statuses}; ran {result.ran}, skipped {result.skipped} "
                 f"already finished, {result.seconds:.1f} s{rate}\n")
    for note in summary["notes"] if notes else ():
        stdout.write(f"note: {note}\n")
    stdout.write(f"Wrote {Path(out) / 'manifest.json'}, {Path(out) / 'coco.json'}, {Path(out) / 'summary.json'}\n")


def exit_status(result: Any) -> int:

    if result.stopped:
        return EXIT_STOPPED
    return EXIT_BACKEND if result.summary["statuses"].get("failed") or result.summary["statuses"].get(
        "cancelled") else EXIT_OK
