"""The entry point of the command line: ``python -m sam3_agent`` and the ``sam3-agent`` console script.

``main`` parses the flags (``parser``: light, so ``--help`` answers at once), then imports and runs the command:
``run`` (``run``), ``video`` (``video``), ``export`` (``export``), ``batch`` and ``eval`` (``datasets``).

Exit status: 0 finished (masks or no mask); 2 bad input; 3 backend failure; 4 round budget
exhausted; 5 the outputs could not be written (disk full, folder removed...); 130 stopped (Ctrl-C or
SIGTERM). Failures print one line on stderr.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from ..errors import EXIT_BACKEND, EXIT_INPUT, EXIT_STOPPED, InputError, Sam3AgentError
from .datasets import DATASET_COMMANDS, dataset_command
from .parser import build_parser
from .signals import stop_signals

__all__ = ["build_parser", "console_script", "main"]


def main(argv: Sequence[str] | None = None, prog: str = "python -m sam3_agent") -> int:
    """Run the command ``argv`` names (default ``sys.argv[1:]``) and return its exit status."""
    args = build_parser(prog).parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if not args.verbose:  # the CLI prints its own progress; transformers' bars only add noise
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        logging.getLogger("huggingface_hub").setLevel(logging.ERROR)  # retry chatter; our error says it all
    if args.command == "export":
        from .export import export_command

        return export_command(args, sys.stdout, sys.stderr)
    # SIGTERM (kill, docker stop) stops a run like Ctrl-C does, so its trace is still written.
    try:
        with stop_signals():  # a run, a batch or an evaluation: SIGTERM stops it like Ctrl-C
            if args.command in DATASET_COMMANDS:
                return dataset_command(args, sys.stdout, sys.stderr)
            if args.command == "video":
                from .video import video_command

                return video_command(args, sys.stdout, sys.stderr)
            from .run import run_command  # torch, transformers: only once a run is asked for

            return run_command(args, sys.stdout, sys.stderr)
    except KeyboardInterrupt:  # run_command handles it from the run's start on: this is before (e.g. model loading)
        sys.stderr.write("error: stopped by the user before the run started\n")
        return EXIT_STOPPED
    except Sam3AgentError as error:  # anything we raise on purpose is one line for the user
        sys.stderr.write(f"error: {error}\n")
        return EXIT_INPUT if isinstance(error, InputError) else EXIT_BACKEND


def console_script() -> int:
    """The ``sam3-agent`` console script (``pyproject.toml``): ``main`` under that name."""
    return main(prog="sam3-agent")
