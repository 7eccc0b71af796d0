"""One browser session's edits run one at a time, in the order they came; other sessions' edits run beside them.

Gradio's queue orders events per ``concurrency_id``, not per session. With the Correct, Review and canvas events in
one queue of one, one annotator's slow edit (a point click's model call, a large stroke) held every other
annotator's imports and edits. So those events share ``EDIT_QUEUE`` with ``EDIT_CONCURRENCY`` slots, and
``order_by_session`` makes each of their handlers first wait for the earlier events of its own browser session
(``gr.Request.session_hash``) on a first-come, first-served lock: an annotator's own edits still apply in order, each
starting from what the one before left, while other annotators' run beside them.

Gradio starts the events it takes from a queue in the order they arrived and runs an ``async`` handler in its event
loop, so an event reaches its session's lock in arrival order; the handler itself then runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

import anyio
import gradio as gr

EDIT_QUEUE = "correct-edits"
# sessions whose edits run at once: an edit takes milliseconds to a few CPU-seconds (a point click's model call,
# the largest stroke on a large photo), and the point model is shared
EDIT_CONCURRENCY = 4


class SessionOrder:
    """A first-come, first-served lock per browser session, kept only while some event of it waits or runs."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    def busy_sessions(self) -> int:
        """How many sessions have an event waiting or running (the locks held in memory)."""
        return len(self._locks)

    async def run(self, session: str | None, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        """``fn(*args)`` in a worker thread, after every earlier event of ``session`` (None: no wait)."""
        call = functools.partial(fn, *args)
        if session is None:
            return await anyio.to_thread.run_sync(call)
        lock = self._locks.setdefault(session, asyncio.Lock())
        self._users[session] = self._users.get(session, 0) + 1
        try:
            async with lock:  # asyncio.Lock wakes its waiters in the order they came
                return await anyio.to_thread.run_sync(call)
        finally:
            self._users[session] -= 1
            if not self._users[session]:
                del self._users[session], self._locks[session]


def in_session_order(fn: Callable[..., Any], order: SessionOrder) -> Callable[..., Any]:
    """``fn`` as an ``async`` handler that runs after its session's earlier events (``order``).

    Gradio hands handlers a ``gr.Request`` for a parameter annotated so; when ``fn`` has none, the handler takes one
    more, last (given to it, not to ``fn``). Every other parameter, and what Gradio gives it, is ``fn``'s.
    """
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn) or inspect.iscoroutinefunction(fn):
        raise ValueError(f"{getattr(fn, '__name__', fn)!r}: only plain functions can be run in session order")
    signature = inspect.signature(fn)
    hints = typing.get_type_hints(fn)
    params = list(signature.parameters.values())
    requests = (gr.Request, typing.Optional[gr.Request])  # noqa: UP045 - compared with what Gradio resolves
    at = next((i for i, p in enumerate(params) if hints.get(p.name) in requests), None)
    if at is None:
        params.append(inspect.Parameter("session_request", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                        annotation=gr.Request))
        hints = {**hints, "session_request": gr.Request}

    async def ordered(*args: Any) -> Any:
        if at is None:
            *args, request = args  # type: ignore[assignment]
        else:
            request = args[at]
        return await order.run(getattr(request, "session_hash", None), fn, tuple(args))

    ordered.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    ordered.__annotations__ = {name: hint for name, hint in hints.items() if name != "return"}
    ordered.__name__ = getattr(fn, "__name__", "handler")
    ordered.__doc__ = fn.__doc__
    ordered.in_session_order = True  # type: ignore[attr-defined]
    return ordered


def order_by_session(blocks: gr.Blocks, concurrency_id: str = EDIT_QUEUE) -> int:
    """Run every event of ``blocks`` in the queue ``concurrency_id`` in session order; returns how many there are.
    Call once the page is built (``ui.layout.build_demo``)."""
    order = SessionOrder()
    count = 0
    for block_fn in blocks.fns.values():
        if block_fn.concurrency_id == concurrency_id and block_fn.fn is not None:
            block_fn.fn = in_session_order(block_fn.fn, order)
            count += 1
    return count
