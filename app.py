"""SAM3 Agent web app.

    python app.py                          # real models (loaded once, shared by all sessions)
    python app.py --preset tiny            # offline, tiny random-weight models
    python app.py --preset tiny --script sam3_agent/assets/example_script.json

Every flag has an environment variable (``python app.py --help`` lists them), so the same file runs
as a Hugging Face Space.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Sequence

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

from sam3_agent.models.zerogpu import import_spaces  # imports neither torch nor Gradio

# On a ZeroGPU Space `spaces` must come before anything that imports torch or touches CUDA; elsewhere it is absent
# or does nothing. See sam3_agent.models.zerogpu.
import_spaces()

# Only light imports before the flags are parsed: `python app.py --help` answers at once; Gradio and torch
# load afterwards (their import takes seconds to tens of seconds).
from sam3_agent.errors import EXIT_INPUT, InputError  # noqa: E402
from sam3_agent.ui.server_port import listen_problem  # noqa: E402
from sam3_agent.ui.settings import parse_settings  # noqa: E402

logger = logging.getLogger("app")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse settings, check the port, load the models once, build the page and serve it until interrupted.

    Returns the exit status: 0 after serving, 2 bad settings or an address it cannot listen on (said before any
    model loads), 130 stopped while the models loaded."""
    try:
        settings, verbose = parse_settings(argv)
    except InputError as error:
        sys.stderr.write(f"error: {error}\n")
        return EXIT_INPUT
    problem = listen_problem(settings.host, settings.port)  # before minutes of model loading, not after
    if problem:
        sys.stderr.write(f"error: {problem}\n")
        return EXIT_INPUT
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per HTTP request otherwise
    # SIGTERM (docker stop, a Space restarting, kill) ends the server like Ctrl-C, so the clean-up below runs.
    signal.signal(signal.SIGTERM, _stop)
    try:
        started = time.perf_counter()
        logger.info("starting SAM3 Agent: importing Gradio, torch and transformers...")
        from sam3_agent.ui.layout import create_demo, launch, use_private_cache

        logger.info("imported in %.1f s", time.perf_counter() - started)
        # Files this process writes (Gradio's cached uploads and results, the downloads) are removed when it exits.
        atexit.register(shutil.rmtree, use_private_cache(), ignore_errors=True)
        demo, handlers = create_demo(settings)
    except InputError as error:
        sys.stderr.write(f"error: {error}\n")
        return EXIT_INPUT
    except KeyboardInterrupt:
        sys.stderr.write("stopped while the models were loading\n")
        return 130
    atexit.register(handlers.close)
    try:
        launch(demo, settings)
    except OSError:
        problem = listen_problem(settings.host, settings.port)  # taken while the models loaded?
        if problem is None:
            raise  # another fault: its traceback is what a report needs
        sys.stderr.write(f"error: {problem}\n")
        return EXIT_INPUT
    return 0


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
