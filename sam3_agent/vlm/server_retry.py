"""How calls to a server are retried and how its failures are worded.

``RetryPolicy`` says how often and how long to wait (exponential backoff, a server's ``Retry-After`` honoured
up to a cap); ``RETRY_STATUSES`` are the statuses the official OpenAI clients retry. The rest words a failure
for a user: an error body's start, a connection failure's reason, a hint per HTTP status.
"""

from __future__ import annotations

import email.utils
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

import requests
import urllib3

from ..limits import MAX_MAIN_IMAGES, MAX_MAIN_IMAGES_WITH_TILES, SERVER_IMAGE_LIMIT, VERIFY_IMAGES

logger = logging.getLogger(__name__)

EXCERPT_CHARS = 500  # how much of a server's error body goes into a message
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})  # the statuses the official OpenAI clients retry


@dataclass(frozen=True)
class RetryPolicy:
    """How failed attempts are retried.

    Attributes:
        retries: further attempts after the first (connection errors, connect timeouts, ``RETRY_STATUSES``).
        backoff: seconds before the first retry; doubled for each further one (0.5 s, 1 s, 2 s...).
        max_backoff: the longest backoff wait.
        max_retry_after: the longest wait a server's ``Retry-After`` may ask for (longer asks are capped).
        rate_limit_retries: further attempts after HTTP 429 (counted apart: a 429 says "later", not "broken", and
            the requests in flight are lowered meanwhile, ``server_gate``).
    """

    retries: int = 2
    backoff: float = 0.5
    max_backoff: float = 8.0
    max_retry_after: float = 30.0
    rate_limit_retries: int = 10

    def wait(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        return min(self.backoff * 2**attempt, self.max_backoff)


def excerpt(response: requests.Response) -> str:
    """The start of an error body (bounded read; never the whole of a huge body)."""
    try:
        data = response.raw.read(EXCERPT_CHARS * 4, decode_content=True) or b""
    except (urllib3.exceptions.HTTPError, OSError):
        return ""
    return data.decode("utf-8", errors="replace").strip()[:EXCERPT_CHARS]


def retry_after(response: requests.Response) -> float | None:
    """Seconds asked for by ``Retry-After`` (seconds or an HTTP date), or ``None``."""
    value = (response.headers.get("Retry-After") or "").strip()
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - time.time()


_CONTEXT_LENGTH = re.compile(
    r"context (?:length|window)|max_model_len|maximum (?:model|sequence) length|too many tokens|prompt is too long"
    r"|(?:input|prompt|sequence)[^.]{0,40}(?:too long|longer than|exceeds)", re.IGNORECASE)


# vLLM's refusals of more images than --limit-mm-per-prompt allows ("At most 3 image(s) may be provided in one
# request.", older: "... in one prompt."; "You set image=2 ... but passed 3 image items in the same prompt.")
_IMAGE_COUNT = re.compile(r"image\(s\) may be provided|image items in the same prompt|limit.mm.per.prompt", re.IGNORECASE)


def error_hint(status: int | None, text: str, request_bytes: int | None = None) -> str:
    """What to change for an HTTP error ``status`` (``None``: an error chunk in the stream) whose body is ``text``
    (with a leading space), or ``""``. ``request_bytes``: the size of the request, named for a 413."""
    if status in (401, 403):
        return " (check the API key: OPENAI_API_KEY)"
    if status == 404:
        return " (check the base URL, usually ending in /v1, and that the server serves this model name)"
    if status == 413:
        size = f" of {request_bytes:,} bytes" if request_bytes else ""
        return (f" (the request{size} is larger than the server or a proxy in front of it accepts: send smaller "
                "images with --max-pixels, or raise the proxy's body limit, e.g. nginx's client_max_body_size)")
    if status in (None, 400, 422) and _IMAGE_COUNT.search(text):
        return (f" (the server takes fewer images per request than the agent sends: up to {MAX_MAIN_IMAGES} in a "
                f"main request (the photo and the overlay; {MAX_MAIN_IMAGES_WITH_TILES} with --dense-tiles) and "
                f"{VERIFY_IMAGES} in a verification; start it with vLLM's --limit-mm-per-prompt "
                f"'{{\"image\": {SERVER_IMAGE_LIMIT}}}' ({MAX_MAIN_IMAGES_WITH_TILES} with --dense-tiles))")
    if status in (None, 400, 422) and _CONTEXT_LENGTH.search(text):
        return (" (the request is longer than the model's context on the server: send smaller images with "
                "--max-pixels, or start the server with a longer context, e.g. vLLM's --max-model-len 32768)")
    return ""


def connection_reason(exc: BaseException) -> str:
    """A connection failure as a short reason a user can act on (never a Python class name)."""
    text = str(exc)
    logger.debug("connection failure: %r", exc)
    errno = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", text)
    if errno:
        return errno.group(1).strip()
    lowered = text.lower()
    if "timed out" in lowered or "timeout" in lowered:
        return "timed out"
    if "remotedisconnected" in lowered or "without response" in lowered:
        return "the server closed the connection without answering"
    if "incompleteread" in lowered or "connection broken" in lowered or "reset" in lowered:
        return "the connection broke off"
    return "the connection failed"


def short(value: Any) -> str:
    """``value`` (text, or any JSON value written out) cut to ``EXCERPT_CHARS`` for a message."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 3] + "..."
