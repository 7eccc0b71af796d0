"""The command line, ``python -m sam3_agent`` or ``sam3-agent``: the entry point (``main``), the parser of every
subcommand (``parser``), the commands ``run`` (``run``), ``video`` (``video``), ``export`` (``export``; a video trace:
``export_video``), ``batch`` and ``eval`` (``datasets``; a video benchmark: ``eval_video``), the signal handling they
share (``signals``), and the model and agent flags declared once for every subcommand and the app (``flags``).
``main``, ``parser``, ``flags`` and ``signals`` import no model library, so ``--help`` answers at once; the commands
import theirs when they run.

May import: everything below it (the public API, ``presets``, ``datasets`` and the wings). Nothing below it
imports it.
"""
