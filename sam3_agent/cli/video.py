"""``video``: answer a query over a clip, ``python -m sam3_agent video --video CLIP --query TEXT --out DIR``.

The agent reasons on the keyframe (``--keyframe N`` or ``--keyframe-time S``; default the first frame), printed round
by round as ``run`` prints a photo's, then SAM 3's video tracker carries the selected masks through the clip, forward
and backward, with a progress bar. DIR gets:

- the video trace (``video_trace.json``, ``keyframes/<frame>/``: each keyframe's run as an image trace);
- ``masks/00000.png`` ...: one palette PNG per frame (DAVIS convention: pixel value = object id, 0 = background);
- ``tracks_ytvis.json``: a YouTube-VIS-style JSON (RLE per frame per object; pycocotools decodes it);
- ``overlay.mp4``: the clip with the objects drawn (H.264; plays in browsers), unless ``--no-overlay-video``.

Every input a model is not needed for (flags, the query, ``--out``, the clip within its caps, the keyframe) is checked
before any model loads, and DIR is made only once the run has started. Exit status as ``run``: 0 finished (objects or
none), 2 bad input, 3 backend failure, 4 round budget exhausted on the keyframe, 5 outputs not written, 130 stopped
(every frame tracked until then is written).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, TextIO

from ..errors import EXIT_BACKEND, EXIT_BUDGET, EXIT_INPUT, EXIT_OK, EXIT_SAVE, EXIT_STOPPED, BackendError, InputError
from ..messages import checked_query, terminal_safe
from ..trace.out_folder import check_out_folder, make_out_folder
from .flags import agent_config, backend_settings, clip_caps, video_config, with_planned_batch
from .signals import signals_deferred


def add_video_command(commands: Any) -> None:
    """Declare ``video`` and its flags on the subcommands of the parser."""
    from ..limits import MAX_QUERY_CHARS
    from .flags import add_model_arguments, add_video_arguments

    video = commands.add_parser("video", help="answer a query over a clip: the agent on a keyframe, SAM 3 tracks "
                                              "what it chose; writes the trace, palette PNGs, YouTube-VIS JSON and an "
                                              "overlay video")
    video.add_argument("--video", required=True, help="the clip: a video file (MP4, MOV, WebM, MKV, AVI), a folder "
                                                      "of frames or a .zip of frames")
    video.add_argument("--query", required=True, help=f'what to segment, e.g. "the player who scores" (at most '
                                                      f'{MAX_QUERY_CHARS} characters)')
    video.add_argument("--out", required=True, help="output folder (created if needed)")
    where = video.add_mutually_exclusive_group()
    where.add_argument("--keyframe", type=int, default=None, metavar="N",
                       help="the frame the agent reasons on, 0-based (default 0, the first)")
    where.add_argument("--keyframe-time", type=float, default=None, metavar="S",
                       help="or the frame shown at S seconds into the clip")
    video.add_argument("--frame-rate", type=float, default=None, metavar="FPS",
                       help="frames per second of a folder or .zip of frames (a video file has its own times)")
    add_video_arguments(video)
    video.add_argument("--no-overlay-video", dest="overlay_video", action="store_false",
                       help="do not write overlay.mp4 (the other outputs still are)")
    add_model_arguments(video, image_limit_help="refuse clips whose frames have more pixels than this")
    video.add_argument("-v", "--verbose", action="store_true", help="log debug messages")


def checked_video_inputs(args: argparse.Namespace) -> tuple[Any, Any, Any, Any, str, int]:
    """Everything ``video`` can check without a model, checked before any loads: the flags and script, the video
    options, the query, ``--out`` (nothing created), the clip (opened within its caps), the keyframe.

    Returns:
        (backend settings, agent config, video config, the open clip, the query, the keyframe index).

    Raises:
        InputError: the first input refused; the message says what to change.
    """
    from ..video.clip import open_clip

    settings = backend_settings(args)
    config = agent_config(args)
    options = video_config(args)
    query = checked_query(args.query)
    check_out_folder(args.out)
    clip = open_clip(args.video, clip_caps(args), frame_rate=args.frame_rate)
    try:
        if args.keyframe_time is not None:
            keyframe = clip.info.index_at(args.keyframe_time)
        else:
            keyframe = 0 if args.keyframe is None else args.keyframe
            if not 0 <= keyframe < clip.info.frame_count:
                raise InputError(f"--keyframe {keyframe} is not in the clip: its frames are numbered 0 to "
                                 f"{clip.info.frame_count - 1}")
    except InputError:
        clip.close()
        raise
    return settings, config, options, clip, query, keyframe


class TrackingBar:
    """The progress of tracking on the terminal: a tqdm bar of frames done of total, with frames/s."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.bar: Any = None

    def __call__(self, event: Any) -> None:
        from tqdm import tqdm

        from ..video.events import FrameTracked, TrackingStarted

        if isinstance(event, TrackingStarted):
            if self.bar is None:
                self.bar = tqdm(total=event.total, unit="frame", desc="Tracking", file=self.stream, leave=True,
                                dynamic_ncols=True, mininterval=0.5)
            else:
                self.bar.total = event.total
                self.bar.refresh()
        elif isinstance(event, FrameTracked) and self.bar is not None:
            self.bar.total = max(self.bar.total or 0, event.total)
            self.bar.update(event.done - self.bar.n)
        else:  # TrackingFinished
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def video_command(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """``video``: check every input, load the models, run over the clip, write the outputs. Returns the exit
    status."""
    from ..presets import build_backends, build_video_tracker, share_sam3_backbone
    from ..video.events import (
        FrameTracked,
        KeyframeStarted,
        NewcomerChecked,
        ObjectsChosen,
        TrackingFinished,
        TrackingStarted,
        VideoRunFinished,
    )
    from ..video.run import VideoAgent
    from .run import EventPrinter, tiny_preset_note  # torch and the model wings: only once a run is asked for

    out = Path(args.out)
    try:
        settings, config, options, clip, query, keyframe = checked_video_inputs(args)
    except InputError as error:
        stderr.write(f"error: {error}\n")
        return EXIT_INPUT
    with clip:
        info = clip.info
        stdout.write(f"Clip: {info.file_name}, {info.frame_count} frames, {info.width} x {info.height}"
                     f"{f', {info.fps:g} fps' if info.fps else ''}; keyframe {keyframe}\n")
        if args.preset == "tiny":
            stdout.write(tiny_preset_note(args.script is not None))
        try:
            stdout.write("Loading models...\n")
            stdout.flush()
            loaded = time.perf_counter()
            backends = build_backends(settings)
            config = with_planned_batch(config, args, backends.settings)
            tracker = build_video_tracker(settings.preset, settings.sam3_model, settings.device,
                                          backends.settings.get("sam3_dtype"))
            share_sam3_backbone(tracker, backends.segmenter)
            stdout.write(f"Models ready in {time.perf_counter() - loaded:.1f} s\n")
            from ..agent.loop import Agent

            agent = Agent.from_backends(backends, config)
            run = VideoAgent(agent, tracker, options).start(clip, query, keyframes=[keyframe])
            make_out_folder(out)
        except InputError as error:
            stderr.write(f"error: {error}\n")
            return EXIT_INPUT
        except BackendError as error:
            stderr.write(f"error: {error}\n")
            return EXIT_BACKEND
        printer, bar = EventPrinter(stdout), TrackingBar(stderr)
        try:
            for event in run:
                if isinstance(event, TrackingStarted | FrameTracked | TrackingFinished):
                    bar(event)
                elif isinstance(event, KeyframeStarted):
                    stdout.write(f"Keyframe {event.frame_index} ({event.seconds:.2f} s): the agent reasons\n")
                elif isinstance(event, ObjectsChosen):
                    stdout.write(f"Objects: {_ids(event.new)} new, {_ids(event.matched)} matched on frame "
                                 f"{event.frame_index}\n")
                elif isinstance(event, NewcomerChecked):
                    check = event.check
                    found = f" as object {check.object_id}" if check.object_id else ""
                    stdout.write(f"Newcomer on frame {check.frame_index}: {check.outcome}{found}\n")
                elif not isinstance(event, VideoRunFinished):
                    printer(event)  # the keyframe run's own events, printed as a photo's
                stdout.flush()
        except KeyboardInterrupt:  # the first signal: stop, then write what was tracked
            run.cancel()
            _drain(run)
        finally:
            bar.close()
        with signals_deferred() as received:
            code = finish_video(run.trace, clip, out, args.overlay_video, stdout, stderr)
        if received:
            stderr.write(f"note: {received[0]} arrived while the outputs were written; they were completed first\n")
        return code


def _drain(run: Any) -> None:
    """Let a cancelled run end (it records the frames tracked and its status); a second Ctrl-C leaves it."""
    try:
        for _ in run:
            pass
    except KeyboardInterrupt:
        pass
    if run.trace.status == "running":
        run.trace.status = "cancelled"
        run.trace.error = "stopped by the user (Ctrl-C or SIGTERM); every frame tracked until then is kept"


def _ids(ids: tuple[int, ...]) -> str:
    return ", ".join(str(i) for i in ids) or "none"


def finish_video(trace: Any, clip: Any, out: Path, overlay_video: bool, stdout: TextIO, stderr: TextIO) -> int:
    """Write a finished (or stopped) video run's outputs and return its exit status (``EXIT_SAVE`` when a write
    failed)."""
    tracked = int(trace.timings.get("frames_tracked", 0))
    outcome = f"{trace.status}, {len(trace.tracks.objects)} object(s), {tracked} frame(s) tracked"
    from ..video.outputs import write_video_outputs

    try:
        written = write_video_outputs(trace, clip, out, overlay_video)
    except (OSError, InputError) as error:
        reason = getattr(error, "strerror", None) or error
        stderr.write(f"error: the run ended ({outcome}) but its outputs could not be written to {out}: {reason}; "
                     "free some space or choose another --out, then run again\n")
        return EXIT_SAVE
    stdout.write(f"Done: {outcome}\n")
    stdout.write("Wrote " + ", ".join(str(p) for p in written) + "\n")
    if trace.status in ("done", "no_mask"):
        return EXIT_OK
    stderr.write(f"error: {trace.status}: {terminal_safe(str(trace.error))}\n")
    return {"failed": EXIT_BACKEND, "max_rounds": EXIT_BUDGET}.get(trace.status, EXIT_STOPPED)
