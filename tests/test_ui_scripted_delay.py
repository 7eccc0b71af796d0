"""ScriptedVLM's per-piece delay (used by the app to replay scripts at a visible pace and to test Stop)."""

from __future__ import annotations

import threading
import time

import pytest

from sam3_agent.messages import Generation, Message, TextPart
from sam3_agent.vlm.scripted import ScriptedVLM

ASK = [Message("user", (TextPart("go"),))]


def test_pieces_are_spaced_by_the_delay():
    vlm = ScriptedVLM(["a b c d e"], piece_delay=0.05)
    started = time.perf_counter()
    items = list(vlm.stream(ASK))
    elapsed = time.perf_counter() - started
    assert items[:-1] == ["a ", "b ", "c ", "d ", "e"] and items[-1] == Generation("a b c d e", "stop", None, 5)
    assert elapsed >= 0.25  # five pieces, each after 0.05 s (an upper bound would time the machine, not the code)


def test_stop_cuts_the_delay_short_and_cancels():
    stop = threading.Event()
    vlm = ScriptedVLM([" ".join(["word"] * 100)], piece_delay=10.0)
    threading.Timer(0.1, stop.set).start()
    started = time.perf_counter()
    items = list(vlm.stream(ASK, stop=stop))
    assert time.perf_counter() - started < 10.0  # less than one piece's delay: the wait was cut short
    assert items == [Generation("", "cancelled", None, 0)]


def test_a_negative_delay_is_refused():
    with pytest.raises(ValueError, match="piece_delay must be >= 0 seconds, got -1"):
        ScriptedVLM(["x"], piece_delay=-1)
