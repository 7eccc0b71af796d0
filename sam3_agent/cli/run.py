"""``run``: answer a query on one image, ``python -m sam3_agent run --image PATH --query TEXT --out DIR``.

Prints each round as it happens and writes to DIR: the trace (``trace.json``, ``images/``, ``masks/``; saved
after every round on a background thread, so a killed run keeps its finished rounds), ``final_overlay.png`` and
``final_masks.json`` (COCO results format), each written under a temporary name and renamed into place.
A Ctrl-C or SIGTERM while a run's files are being written waits
until they are complete. Every input is checked before any model loads (``checked_inputs``), and DIR is made only once
the run has started: a refused run leaves the disk as it was. Model text is printed through ``messages.terminal_safe``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TextIO

import cv2
import numpy as np
from PIL import Image

from .. import Agent, AgentConfig, BackendSettings, Trace, TraceWriter, build_backends, load_image, save_trace
from ..errors import EXIT_BACKEND, EXIT_BUDGET, EXIT_INPUT, EXIT_OK, EXIT_SAVE, EXIT_STOPPED, BackendError, InputError
from ..events import Event, MaskVerdictReady, RoundFinished, RoundStarted, RunFinished, ToolStarted
from ..imaging.overlay import render_numbered_overlay
from ..mask_set import to_coco_results
from ..messages import ToolCall, checked_query, terminal_safe
from ..package_files import EXAMPLE_SCRIPT, shown_path
from ..trace.encode import photo_file_of
from ..trace.out_folder import check_out_folder, make_out_folder
from ..trace.writer import write_atomic
from ..verification import final_mask_checks
from ..vlm.image_fit import ImageLimits, check_photo
from .flags import agent_config, backend_settings, with_planned_batch
from .signals import signals_deferred

EXCERPT_CHARS = 160

def _call_text(call: ToolCall) -> str:
    params = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in call.parameters.items())
    return f"{call.name}({params})"


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= EXCERPT_CHARS else flat[: EXCERPT_CHARS - 3] + "..."


class EventPrinter:
    """Prints events as the CLI shows them: round header, reasoning excerpt and call when the tool
    starts, verdicts as they come, then the outcome and timings of the round. The reasoning is the agent's
    reading of it (``ToolStarted.reasoning``, ``Round.reasoning``): nothing here parses model text. Every line goes
    through ``messages.terminal_safe``: model text reaches the terminal with its control characters and escape
    sequences shown, not obeyed (the trace keeps the raw text)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def _write(self, text: str) -> None:
        self.stream.write(terminal_safe(text))

    def __call__(self, event: Event) -> None:
        write = self._write
        if isinstance(event, RoundStarted):
            note = f", {len(event.context.dropped)} message(s) pruned" if event.context.dropped else ""
            write(f"Round {event.round_index}/{event.max_rounds}: asking the VLM "
                  f"({len(event.context.kept)} messages, {event.context.image_count} image(s){note})\n")
        elif isinstance(event, ToolStarted):
            self._reasoning(event.reasoning)
            write(f"  call: {_call_text(event.call)}\n")
        elif isinstance(event, MaskVerdictReady):
            v = event.verdict
            source = {"model": "", "fallback": " (no clear verdict, even when asked again; kept)"}.get(
                v.source, f" (check failed: {v.error}; kept)")
            verdict = "not confirmed" if v.verdict == "unconfirmed" else v.verdict
            write(f"    mask {v.mask_number}/{event.total}: {verdict}{source}\n")
        elif isinstance(event, RoundFinished):
            r = event.round
            if r.call is None:
                self._reasoning(r.reasoning)
            if r.error:
                write(f"  mistake ({r.error}): {_excerpt(r.error_detail or r.output)}\n")
            elif r.result is not None:
                write(f"  result: {r.result.summary}\n")
            tokens = f", {r.prompt_tokens} prompt tokens" if r.prompt_tokens else ""
            write(f"  time: VLM {r.vlm_seconds:.1f} s, tool {r.tool_seconds:.1f} s{tokens}\n")
        elif isinstance(event, RunFinished):
            t = event.trace
            count = len(t.final_masks) if t.final_masks is not None else 0
            write(f"Finished: {t.status} after {len(t.rounds)} round(s), {count} final mask(s)\n")
        self.stream.flush()

    def _reasoning(self, reasoning: str) -> None:
        if reasoning.strip():
            self._write(f"  reasoning: {_excerpt(reasoning)}\n")


def write_outputs(trace: Trace, out: Path, writer: TraceWriter | None = None) -> None:
    """Write the trace, final_overlay.png and final_masks.json into ``out``.

    Args:
        writer: the run's ``TraceWriter`` (its last snapshot is replaced by ``trace`` and flushed); ``None``
            saves the trace in one step.

    Raises:
        TraceSaveError: the trace could not be written (``out`` keeps its previous trace, if any).
        OSError: the overlay or the COCO file could not be written.
    """
    out.mkdir(parents=True, exist_ok=True)
    if writer is None:
        save_trace(trace, out)
    else:
        writer.submit(trace)
        writer.close()
    final = trace.final_masks
    if final is not None and len(final):
        overlay = render_numbered_overlay(trace.image, final)
        results = to_coco_results(final, checks=final_mask_checks(trace))
    else:
        overlay = trace.image.copy()
        results = []
    # OpenCV's PNG writer with Huffman coding only: about 3x faster than Pillow's default level and a third
    # faster than its fastest level (a 12 MP overlay takes ~0.7 s instead of ~2 s), files a few % larger.
    ok, png = cv2.imencode(".png", cv2.cvtColor(np.asarray(overlay), cv2.COLOR_RGB2BGR),
                           [cv2.IMWRITE_PNG_STRATEGY, cv2.IMWRITE_PNG_STRATEGY_HUFFMAN_ONLY])
    if not ok:
        raise OSError("the final overlay could not be encoded as PNG")
    # temporary names renamed into place: a full disk never leaves a truncated file under the real name
    write_atomic(out / "final_overlay.png", png.tobytes())
    write_atomic(out / "final_masks.json", json.dumps(results, indent=1).encode("utf-8"))


def prepare_out_dir(out: Path) -> None:
    """Create the output folder of a run that has started (``trace.out_folder``: ``check_out_folder`` checked it
    before any model loaded) and make sure files can be written there.

    Raises:
        InputError: it cannot be made or written (something changed since the check).
    """
    make_out_folder(out)
    try:
        (out / "images").mkdir(exist_ok=True)
        probe = out / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise InputError(
            f"cannot write to the output folder {out}: {error.strerror or error}; choose another --out"
        ) from None


def checked_inputs(args: argparse.Namespace) -> tuple[BackendSettings, AgentConfig, Image.Image, str]:
    """Everything ``run`` can check without a model, checked before any loads: the flags and the script
    (``flags.backend_settings``), the query (``messages.checked_query``), ``--out`` (``check_out_folder``: nothing
    is created), the photo (loaded within ``--max-image-pixels``, and seen at the pixel bounds the flags give,
    ``image_fit.check_photo``).

    Returns:
        (backend settings, agent config, the photo as RGB, the query as a run takes it).

    Raises:
        InputError: the first input refused; the message says what to change.
    """
    settings = backend_settings(args)
    config = agent_config(args)
    query = checked_query(args.query)
    check_out_folder(args.out)
    image = load_image(args.image, max_pixels=args.max_image_pixels)
    check_photo(image, ImageLimits.with_bounds(args.min_pixels, args.max_pixels), bound_advice="--max-pixels")
    return settings, config, image, query


def tiny_preset_note(scripted: bool) -> str:
    """What a run on the tiny preset says before its models load: random weights, and without ``--script`` how to
    run the guided demo instead (the example script's path as typed from the current folder)."""
    if scripted:
        return "Note: the tiny preset's SAM 3 has random weights: its masks mean nothing (the replies are scripted).\n"
    return ("Note: the tiny preset's models have random weights: the VLM writes random text, so this run shows the "
            "code paths only and will likely spend its whole round budget (exit 4).\n"
            "      For the guided demo, replay the example replies: add "
            f"--script {shown_path(EXAMPLE_SCRIPT)}\n")


def run_command(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """``run``: check every input, load the models, run, and write the outputs into ``--out``, which is made only
    once the run has started (a refused run leaves the disk as it was). Returns the exit status."""
    out = Path(args.out)
    try:
        settings, config, image, query = checked_inputs(args)
    except InputError as error:
        stderr.write(f"error: {error}\n")
        return EXIT_INPUT
    if args.preset == "tiny":
        stdout.write(tiny_preset_note(args.script is not None))
    try:
        stdout.write("Loading models...\n")
        stdout.flush()
        loaded = time.perf_counter()
        backends = build_backends(settings)
        config = with_planned_batch(config, args, backends.settings)  # smaller on a small GPU
        stdout.write(f"Models ready in {time.perf_counter() - loaded:.1f} s\n")
        agent = Agent.from_backends(backends, config)  # refuses a tool format the loaded model cannot take
        agent_run = agent.start(image, query, image_name=args.image, image_file=photo_file_of(args.image))
        prepare_out_dir(out)  # the run has started: now its folder may be made
    except InputError as error:
        stderr.write(f"error: {error}\n")
        return EXIT_INPUT
    except BackendError as error:
        stderr.write(f"error: {error}\n")
        return EXIT_BACKEND
    writer = TraceWriter(out)
    writer.submit(agent_run.trace)
    try:
        printer = EventPrinter(stdout)
        for event in agent_run:
            printer(event)
            if isinstance(event, RoundFinished):
                writer.submit(agent_run.trace)  # saved off the hot path: a killed run keeps its rounds
    except KeyboardInterrupt:  # the first signal; any later one waits (see _StopSignals) until the files are written
        pass
    with signals_deferred() as received:  # the run is over: nothing may interrupt writing it
        agent_run.abandon("stopped by the user (Ctrl-C or SIGTERM)")  # no change to a run that ended by itself
        code = finish_run(agent_run.trace, out, stdout, stderr, writer)
    if received:
        stderr.write(f"note: {received[0]} arrived while the outputs were written; they were completed first\n")
    return code


def finish_run(trace: Trace, out: Path, stdout: TextIO, stderr: TextIO, writer: TraceWriter | None = None) -> int:
    """Write a finished (or stopped) run's outputs (through the run's ``TraceWriter`` when given, which saved its
    rounds so far) and return the exit status of the run.

    A write that fails (disk full, folder removed, permissions changed during the run) is reported as such, with the
    run's outcome, and exits with ``EXIT_SAVE``: it is not bad input.
    """
    outcome = f"{trace.status} after {len(trace.rounds)} round(s)"
    try:
        write_outputs(trace, out, writer)
    except OSError as error:
        stderr.write(f"error: the run ended ({outcome}) but its outputs could not be written to {out}: "
                     f"{error.strerror or error}; free some space or choose another --out, then run again\n")
        return EXIT_SAVE
    stdout.write(f"Wrote {out / 'trace.json'}, {out / 'final_overlay.png'}, {out / 'final_masks.json'}\n")
    if trace.status in ("done", "no_mask"):
        return EXIT_OK
    stderr.write(f"error: {trace.status}: {terminal_safe(str(trace.error))}\n")  # may quote the model
    return {"failed": EXIT_BACKEND, "max_rounds": EXIT_BUDGET}.get(trace.status, EXIT_STOPPED)
