"""A request refused for its input, as the app raises it: one warning line in the server's log, the message to the
client, no traceback.

Gradio prints the traceback of every ``gr.Error`` by default. For bad input (a file that is not an image, an empty
query) that buries the server's log in stacks that say nothing more than the message the client already got; a fault
of the server itself keeps its traceback (raise a plain ``gr.Error`` or let the exception through).
"""

from __future__ import annotations

import logging

import gradio as gr

from ..messages import terminal_safe

logger = logging.getLogger(__name__)


def refused(message: str, what: str) -> gr.Error:
    """The ``gr.Error`` to raise for a request refused for its input; logs ``"<what> refused: <message>"`` once, as a
    warning (the message made safe for a terminal: it may name an uploaded file).

    Args:
        message: what was wrong and what to do, as the client sees it.
        what: the request, for the log (e.g. ``"/segment"``).
    """
    logger.warning("%s refused: %s", what, terminal_safe(message))
    return gr.Error(message, print_exception=False)
